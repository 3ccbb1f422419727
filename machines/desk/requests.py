"""What a request to the desk brings, read within limits: a browser's form from the
desk's own page, a JSON body, and the few kinds of value they hold. Anything too large, of
another kind, not UTF-8, or naming a field twice is refused rather than read in part."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from machines.desk.acting import person_json
from machines.desk.waiting import DeskError, DeskTooLarge
from machines.spec.jsonvalue import describe

MAX_FORM = 64 * 1024
"""The largest form or JSON body the desk reads (bytes)."""

API_FIELDS = frozenset(
    {"machine", "key", "version", "trigger", "actor", "reason", "result", "gate"}
)
"""What ``/api/act`` reads; any other field is refused, never ignored."""
TOKEN_FIELDS = frozenset({"name", "password"})
"""What ``/api/token`` reads; any other field is refused, never ignored."""
FORM_FIELDS = frozenset({"csrf", "version", "trigger", "actor", "reason", "result", "gate"})
"""What an entity page's form sends; any other field is refused, never ignored."""


def posted_here(request: Request) -> bool:
    """A browser's POST from this desk's own page: its ``Origin`` (sent by browsers on every
    POST) is this host, and the browser does not say it came from another site."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


async def _body(request: Request) -> bytes | None:
    """The request's body, or None past ``MAX_FORM`` bytes: refused by its declared length
    before anything is read, and read no further than the limit when it declares none."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > MAX_FORM:
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    return body


async def read_form(request: Request) -> dict[str, Any]:
    """An URL-encoded form (what a browser's form sends); ``DeskTooLarge`` when it is too
    large, a ``DeskError`` naming why when it is of another kind, not UTF-8, has too many
    fields or names a field twice (outsider batch 42, c 4e: all were "too large")."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await _body(request)
    if body is None:
        raise DeskTooLarge(f"the form is larger than {MAX_FORM} bytes")
    if kind not in ("", "application/x-www-form-urlencoded"):
        raise DeskError(f"a form is sent as application/x-www-form-urlencoded, not {kind!r}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise DeskError("the form is not UTF-8") from None
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=20, errors="strict")
    except UnicodeDecodeError:
        raise DeskError("a field of the form is not UTF-8") from None
    except ValueError:
        raise DeskError("the form has more than 20 fields") from None
    twice = given_twice(k for k, _ in pairs)
    if twice:
        raise DeskError(f"the form gives {', '.join(map(repr, twice))} more than once")
    return dict(pairs)


async def read_json_body(request: Request) -> object:
    """A JSON body, read as ``person_json`` reads one (a key given twice, which would leave
    the last one to decide, is refused), or a ``DeskError`` naming why not: too large, or
    not JSON as a person meant it."""
    body = await _body(request)
    if body is None:
        raise DeskTooLarge(f"the body is larger than {MAX_FORM} bytes")
    return person_json(body)


PENDING_QUERY = frozenset({"machine", "state", "limit", "offset"})
"""What ``/api/pending`` reads of its query; anything else is refused."""
WAITING_QUERY = frozenset({"machine", "state", "page"})
"""What the list of what waits (``/``) reads of its query; anything else is refused."""
MAX_PAGE_NUMBER = 10**6


def given_twice(keys: Iterable[str]) -> list[str]:
    """The keys (of a form or a query) given more than once, in order: each a request
    that says two things, which the desk refuses rather than read one of."""
    return sorted(k for k, n in Counter(keys).items() if n > 1)


def query_keys(request: Request) -> list[str]:
    """Each key of the request's query, as often as it is given."""
    return [key for key, _ in request.query_params.multi_items()]


def unknown_query(given: Iterable[str], known: frozenset[str], where: str) -> None:
    """A ``DeskError`` naming the query keys ``where`` does not read, or one given twice
    (``given``: each key as often as the query gives it): a misspelt filter
    (``machin=refund``) must not list everything as if none were given, nor
    ``machine=nope&machine=refund`` whatever the last one says (outsider batch 44, b 32)."""
    keys = list(given)
    unknown = sorted(set(keys) - known)
    if unknown:
        raise DeskError(f"unknown query {unknown}; {where} reads {sorted(known)}")
    twice = given_twice(keys)
    if twice:
        raise DeskError(f"query key(s) {twice} given more than once; give each once")


def query_number(given: str, name: str, low: int, high: int) -> int:
    """A whole number a query gives ``name``, from ``low`` to ``high``; a ``DeskError``
    naming the range otherwise (outsider batch 42, c 4f, 4g: ``limit=-1`` was "not a whole
    number", and ``limit=0`` listed one entry)."""
    digits = given.removeprefix("-")
    if _DIGITS.fullmatch(digits) and len(digits) < 30:
        value = -int(digits) if given.startswith("-") else int(digits)
        if low <= value <= high:
            return value
    raise DeskError(f"{name} must be a whole number from {low:,} to {high:,}, not {given!r:.40}")


def whole_number(given: object, *, json_number: bool = False) -> int:
    """A whole number as a form or a query writes it (ASCII digits, nothing else: not
    ``+2``, `` 2 ``, ``٢`` or ``0_2``, which Python's ``int`` would all take), or as a JSON
    body gives it (``json_number``: a JSON number, not a text)."""
    if json_number:
        value = given if type(given) is int else None
    else:
        text = given if type(given) is str else None
        value = int(text) if text is not None and _DIGITS.fullmatch(text) else None
    if value is None:
        raise DeskError(f"not a whole number: {describe(given)}")
    if not 0 <= value < 2**62:
        raise DeskError("a number out of range")
    return value


_DIGITS = re.compile(r"[0-9]{1,19}")


def text_field(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise DeskError(f"{key!r} must be a string")
    return value


def page_number(text: str | None) -> int:
    """The page of the list a query names (the first when none)."""
    return query_number(text or "1", "page", 1, MAX_PAGE_NUMBER)

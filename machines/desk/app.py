"""The desk as a web application (Starlette; ``machines desk URL`` serves it with uvicorn).

Starlette is small, typed and well kept, runs plain functions in a thread pool (the stores
are synchronous and safe to share between threads) and has a test client; Jinja2 escapes
everything a page shows. No request holds a transaction or a lock beyond its own reads
and the one move it makes.

Routes: ``/login`` (GET, POST), ``/logout`` (POST), ``/`` (what waits: counts and a page
of entities, filtered by machine and state), ``/entity/{machine}/{key}`` (GET: its
context, history, picture and the moves the person may make; POST ``.../act``: make one),
``/api/token`` (POST: name and password for a bearer token), ``/api/pending`` (GET) and
``/api/act`` (POST). Every POST from a browser carries the session's CSRF token, and one
whose ``Origin`` is another site is refused. Every page is sent with headers that forbid
framing, sniffing, caching and any script, and send no referrer to another site (a
browser then names this desk as the ``Origin`` of its own forms).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from machines.desk.accounts import (
    Accounts,
    people,
    read_accounts,
    require_people,
    stamp_of,
    verify,
)
from machines.desk.acting import Decision, act, offered, refusal_status
from machines.desk.requests import (
    API_FIELDS,
    FORM_FIELDS,
    PENDING_QUERY,
    TOKEN_FIELDS,
    WAITING_QUERY,
    page_number,
    posted_here,
    query_keys,
    query_number,
    read_form,
    read_json_body,
    text_field,
    unknown_query,
    whole_number,
)
from machines.desk.served import moved_on, served
from machines.desk.sessions import SAID, SIGNED_OUT, Session, Sessions, same_token
from machines.desk.waiting import (
    MAX_LISTED,
    PAGE,
    DeskError,
    counts,
    page_version,
    pending_entry,
    waiting,
    waiting_states,
)
from machines.errors import MachinesError, printable
from machines.render.dot import to_dot
from machines.render.files import DrawingFailed, render_svg
from machines.store.records import Store

COOKIE = "machines_desk"
LOG = logging.getLogger("machines.desk")
FAILED = "the desk failed to answer this request; nothing more is said here (see its log)"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self' data:; style-src 'self' "
    "'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


ACT, KEY_PARAM = "act", "key"
"""The last segment of an entity's form action, and the query parameter that carries a key
no path can (``pathless``)."""


def pathless(key: str) -> bool:
    """Whether no path can carry ``key``: a browser drops a segment "." or ".." (outsider
    batch 30), and the route's path pattern matches no line break (batch 34, b 15); an
    entity with such a key was listed, and could not be opened or acted on."""
    return key in (".", "..") or "\n" in key


def entity_href(machine: str, key: str, *, act: bool = False) -> str:
    """The path of an entity's page (or, with ``act``, of its form's action). A key no
    path can carry goes in the query (``pathless``)."""
    base = f"/entity/{quote(machine, safe='')}"
    if pathless(key):
        return f"{base}{'/' + ACT if act else ''}?{urlencode({KEY_PARAM: key})}"
    return f"{base}/{quote(key, safe='')}{'/' + ACT if act else ''}"


def desk_app(store: Store, accounts: Accounts, *, sessions: Sessions | None = None) -> Starlette:
    """The desk over ``store``, for ``accounts``."""
    desk = _Desk(store, accounts, sessions or Sessions())
    routes = [
        Route("/login", desk.login_page, methods=["GET"]),
        Route("/login", desk.login, methods=["POST"]),
        Route("/logout", desk.logout, methods=["POST"]),
        Route("/", desk.waiting_page, methods=["GET"]),
        Route("/entity/{machine}", desk.entity_or_act, methods=["GET", "POST"]),
        Route("/entity/{machine}/{key:path}", desk.entity_or_act, methods=["GET", "POST"]),
        Route("/api/token", desk.api_token, methods=["POST"]),
        Route("/api/pending", desk.api_pending, methods=["GET"]),
        Route("/api/act", desk.api_act, methods=["POST"]),
    ]

    async def secured(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            stale = moved_on(desk.store, desk.started)
            if stale is not None and request.url.path.startswith("/api/"):
                response: Response = JSONResponse({"error": stale}, status_code=503)
            elif stale is not None:
                response = desk.page("error.html", None, status=503, message=stale)
            else:
                response = await call_next(request)
        except Exception:  # never a traceback on a page; the desk's log has it
            LOG.exception("the desk failed to answer %s %s", request.method, request.url.path)
            response = desk.page("error.html", None, status=500, message=FAILED)
        response.headers.update(HEADERS)
        return response

    app = Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=secured)])
    return app


class _Desk:
    def __init__(self, store: Store, accounts: Accounts, sessions: Sessions) -> None:
        self.store = store
        self.started = served(store)
        self._accounts = accounts
        self._people = people(store.specs().values())
        self._stamp = stamp_of(accounts.path)
        self._reading = threading.Lock()
        self.sessions = sessions
        folder = Path(__file__).parent / "templates"
        self.templates = Environment(
            loader=FileSystemLoader(folder),
            autoescape=select_autoescape(default=True),
            finalize=_shown,
        )

    # -- pages -----------------------------------------------------------------------------

    def page(
        self, name: str, session: Session | None, *, status: int = 200, **values: Any
    ) -> HTMLResponse:
        text = self.templates.get_template(name).render(
            session=session, csrf=session.csrf if session else "", **values
        )
        return HTMLResponse(text, status_code=status)

    @property
    def accounts(self) -> Accounts:
        """The accounts as the file holds them now: ``add-account`` run while the desk
        serves changes a password or roles at once. A file that cannot be read holds no
        account (fail closed), until it can be read again."""
        with self._reading:
            stamp = stamp_of(self._accounts.path)
            if stamp != self._stamp:
                try:
                    found = read_accounts(self._accounts.path)
                    require_people(found.roles(), self._people, str(found.path))
                    self._accounts = found
                except MachinesError:
                    self._accounts = Accounts(self._accounts.path, {})
                self._stamp = stamp
            return self._accounts

    def live(self, sid: str | None) -> Session | None:
        """The session of ``sid`` with its account as the file holds it now: ended when
        the account is gone or its password changed, its roles those of the file."""
        session = self.sessions.get(sid)
        if session is None:
            return None
        account = self.accounts.by_name.get(session.account.name)
        if account is None or account.password_hash != session.account.password_hash:
            self.sessions.end(sid)
            return None
        return session if account == session.account else replace(session, account=account)

    def session(self, request: Request) -> Session | None:
        return self.live(request.cookies.get(COOKIE))

    def login_page(self, request: Request) -> Response:
        return self.page(
            "login.html", None, message=SAID.get(request.query_params.get("said", ""), "")
        )

    async def login(self, request: Request) -> Response:
        if not posted_here(request):  # another site would sign the browser in as its own
            return self.page(
                "login.html", None, status=403, message="sign in from the desk's own page"
            )
        try:
            form = await read_form(request)
        except DeskError as exc:
            return self.page("login.html", None, status=exc.status, message=str(exc))
        name, password = str(form.get("name", "")), str(form.get("password", ""))
        address = request.client.host if request.client else "unknown"
        if self.sessions.refused(f"address:{address}", f"name:{name}"):
            return self.page(
                "login.html",
                None,
                status=429,
                message="too many failed sign-ins; wait a few minutes",
            )
        account = verify(self.accounts, name, password)
        if account is None:
            self.sessions.failed(f"address:{address}", f"name:{name}")
            return self.page("login.html", None, status=401, message="wrong name or password")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE,
            self.sessions.start(account),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        session = self.session(request)
        try:
            form: dict[str, Any] | None = await read_form(request)
        except DeskError:
            form = None
        if form is not None and posted_here(request):
            # the page says "signed out": the cookie's session ends, and the session the
            # page was shown in (an older tab's, whose cookie another sign-in replaced)
            if session is not None:
                self.sessions.end(request.cookies.get(COOKIE))
            self.sessions.end_with_token(form.get("csrf"))
        response = RedirectResponse(f"/login?said={SIGNED_OUT}", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    def waiting_page(self, request: Request) -> Response:
        session = self.session(request)
        if session is None:
            return _to_login()
        machine = request.query_params.get("machine") or None
        state = request.query_params.get("state") or None
        try:
            unknown_query(query_keys(request), WAITING_QUERY, "this page")
            number = page_number(request.query_params.get("page"))
            listed = waiting(
                self.store, machine=machine, state=state, limit=PAGE + 1, offset=(number - 1) * PAGE
            )
            counted = counts(self.store)
        except MachinesError as exc:  # a DeskError too
            return self.page("error.html", session, status=400, message=str(exc))
        query = {k: v for k, v in (("machine", machine), ("state", state)) if v}
        return self.page(
            "waiting.html",
            session,
            counts=counted,
            waiting=listed[:PAGE],
            machine=machine or "",
            state=state or "",
            number=number,
            previous=urlencode({**query, "page": number - 1}) if number > 1 else None,
            next=urlencode({**query, "page": number + 1}) if len(listed) > PAGE else None,
            machines={m: waiting_states(s) for m, s in sorted(self.store.specs().items())},
            entity_href=entity_href,
        )

    async def entity_or_act(self, request: Request) -> Response:
        session = self.session(request)
        if session is None:
            return _to_login()
        machine, key = request.path_params["machine"], request.path_params.get("key", "")
        if key in ("", ACT) and KEY_PARAM in request.query_params:  # a key no path carries
            key = request.query_params[KEY_PARAM] + ("/act" if key == ACT else "")
        if request.method == "POST":
            if not key.endswith("/act"):
                return self.page("error.html", session, status=404, message="no such page")
            return await self.act(request, session, machine, key.removesuffix("/act"))
        return self.entity(session, machine, key)

    def entity(
        self, session: Session, machine: str, key: str, *, status: int = 200, message: str = ""
    ) -> Response:
        specs = self.store.specs()
        if machine not in specs:
            return self.page(
                "error.html", session, status=404, message=f"no machine {machine!r} here"
            )
        try:
            with self.store.transaction() as tx:
                row = tx.get(machine, key)
                history = tx.history(machine, key) if row is not None else []
                version = page_version(specs, tx, row) if row is not None else 0
        except MachinesError as exc:
            return self.page("error.html", session, status=400, message=str(exc))
        if row is None and key.endswith("/" + ACT):  # no entity of that key: a form's address
            response = self.page(
                "error.html",
                session,
                status=405,
                message=f"this is where a decision on {machine} {key.removesuffix('/' + ACT)!r} "
                "is sent, from the form on its page; open the page instead",
            )
            response.headers["Allow"] = "POST"
            return response
        if row is None:
            return self.page(
                "error.html", session, status=404, message=f"no {machine} {key!r} here"
            )
        spec = specs[machine]
        try:
            moves = offered(self.store, row, session.account.roles)
        except MachinesError as exc:
            return self.page("error.html", session, status=400, message=str(exc))
        taken = [(e.source, e.trigger, e.dest) for e in history]
        return self.page(
            "entity.html",
            session,
            status=status,
            message=message,
            machine=machine,
            row=row,
            version=version,
            spec=spec,
            history=history,
            moves=moves,
            picture=_picture(to_dot(spec, row.state, taken)),
            action=entity_href(machine, key, act=True),
            detail=_detail,
        )

    async def act(self, request: Request, session: Session, machine: str, key: str) -> Response:
        try:
            form = await read_form(request)
        except DeskError as exc:
            return self.entity(session, machine, key, status=exc.status, message=str(exc))
        if not posted_here(request) or not same_token(form.get("csrf"), session.csrf):
            return self.page(
                "error.html",
                session,
                status=403,
                message="this form was not sent from the desk's own page; open the page again",
            )
        unknown = sorted(set(form) - FORM_FIELDS)
        if unknown:
            return self.entity(
                session, machine, key, status=400, message=f"unknown form fields: {unknown}"
            )
        try:
            decision = Decision(
                machine,
                key,
                whole_number(form.get("version")),
                str(form.get("trigger", "")),
                str(form.get("actor", "")),
                session.account.name,
                str(form.get("reason", "")),
                str(form.get("result", "")),
                str(form.get("gate", "")),
            )
            act(self.store, decision, frozenset(session.account.roles))
        except MachinesError as exc:
            return self.entity(session, machine, key, status=refusal_status(exc), message=str(exc))
        return RedirectResponse(entity_href(machine, key), status_code=303)

    # -- the API ---------------------------------------------------------------------------

    async def api_token(self, request: Request) -> Response:
        if not posted_here(request):
            return JSONResponse({"error": "a token is asked for by a script"}, status_code=403)
        try:
            body = await read_json_body(request)
        except DeskError:
            body = None  # a failed sign-in, counted as one
        unread = sorted(set(body) - TOKEN_FIELDS) if isinstance(body, dict) else []
        if unread:  # refused before any password is checked (outsider batch 44, b 33)
            return JSONResponse(
                {"error": f"unknown fields {unread}; a token is asked with {sorted(TOKEN_FIELDS)}"},
                status_code=400,
            )
        address = request.client.host if request.client else "unknown"
        name = str(body.get("name", "")) if isinstance(body, dict) else ""
        if self.sessions.refused(f"address:{address}", f"name:{name}"):
            return JSONResponse({"error": "too many failed sign-ins; wait"}, status_code=429)
        password = body.get("password") if isinstance(body, dict) else None
        account = verify(self.accounts, name, password) if isinstance(password, str) else None
        if account is None:
            self.sessions.failed(f"address:{address}", f"name:{name}")
            return JSONResponse({"error": "wrong name or password"}, status_code=401)
        return JSONResponse(
            {"token": self.sessions.start(account), "expires_in": self.sessions.seconds}
        )

    def bearer(self, request: Request) -> Session | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return self.live(token.strip()) if scheme.lower() == "bearer" else None

    def api_pending(self, request: Request) -> Response:
        if self.bearer(request) is None:
            return JSONResponse(
                {"error": "a bearer token is needed: POST /api/token"}, status_code=401
            )
        query = request.query_params
        try:
            unknown_query(query_keys(request), PENDING_QUERY, "/api/pending")  # batch 42, c 4g
            limit = query_number(query.get("limit", str(PAGE)), "limit", 1, MAX_LISTED)
            offset = query_number(query.get("offset", "0"), "offset", 0, 2**62 - 1)
            listed = waiting(
                self.store,
                machine=query.get("machine") or None,
                state=query.get("state") or None,
                limit=limit,
                offset=offset,
            )
        except MachinesError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"pending": [pending_entry(w) for w in listed]})

    async def api_act(self, request: Request) -> Response:
        session = self.bearer(request)
        if session is None:
            return JSONResponse(
                {"error": "a bearer token is needed: POST /api/token"}, status_code=401
            )
        try:
            body = await read_json_body(request)
        except DeskError as exc:
            return JSONResponse({"error": f"send a JSON object: {exc}"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": "send a JSON object"}, status_code=400)
        unknown = sorted(set(body) - API_FIELDS)
        if unknown:  # a misspelt "result" must not decide without its result
            return JSONResponse(
                {"error": f"unknown fields {unknown}; a decision has {sorted(API_FIELDS)}"},
                status_code=400,
            )
        try:
            decision = Decision(
                text_field(body, "machine"),
                text_field(body, "key"),
                whole_number(body.get("version"), json_number=True),
                text_field(body, "trigger"),
                text_field(body, "actor"),
                session.account.name,
                text_field(body, "reason"),
                json.dumps(body["result"]) if "result" in body else "",
                text_field(body, "gate") if "gate" in body else "",
            )
            row = act(self.store, decision, frozenset(session.account.roles))
        except MachinesError as exc:
            return JSONResponse({"error": str(exc)}, status_code=refusal_status(exc))
        with self.store.transaction() as tx:
            version = page_version(self.store.specs(), tx, row)
        return JSONResponse(
            {"machine": row.machine, "key": row.key, "state": row.state, "version": version}
        )


def _to_login() -> Response:
    return RedirectResponse("/login", status_code=303)


def _picture(dot: str) -> str | None:
    """The entity's picture as a data URL of its SVG (shown by an ``img``, so nothing in it
    runs), or None without Graphviz."""
    try:
        svg = render_svg(dot)
    except DrawingFailed:
        return None  # a page without its picture, rather than no page
    if svg is None:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def _detail(event: Any) -> dict[str, str]:
    detail = getattr(event, "detail", None) or {}
    return {str(k): str(v) for k, v in dict(detail).items()}


def _shown(value: object) -> object:
    """Every text a page shows, with the characters that change how text around them reads
    (a right-to-left override, a control character) written as escapes, as ``machines
    pending`` prints them: a key or a reason is anyone's who may write to the store
    (outsider batch 24: a key with U+202E showed reversed). Line breaks are kept."""
    return printable(value, lines=True) if isinstance(value, str) else value

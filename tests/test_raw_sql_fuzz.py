"""The raw-SQL boundary, fuzzed on SQLite and PostgreSQL: garbage of every type
(tests/garbage.py) in every column of a finished entity, and near-legal moves judged by
the database exactly as ``spec.step`` judges them under the entity's stored context."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from machines.errors import MachinesError
from machines.spec import MachineSpec
from tests.garbage import garbage
from tests.raw_sql import DATABASES, OE, Victims, victims_postgres, victims_sqlite

__all__ = ["victims_postgres", "victims_sqlite"]  # fixtures this module uses


def _bindable(value: Any) -> Any:
    """A garbage value as a driver binds it: None, a 64-bit int, a float, UTF-8 text,
    bytes; anything else as its JSON text if it has one, else its type's name."""
    if value is None or isinstance(value, bytes | float):
        return value
    if isinstance(value, int):
        return int(value) if -(2**63) <= value < 2**63 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode()
    try:
        return json.dumps(value)
    except Exception:  # a hostile object, 10**5000, a cycle: only its type is safe to say
        return f"<{type(value).__name__}>"


BINDABLE = garbage(
    extra=("{}", "[]", '{"result":{"amount":5}}', '{"amount":5}', "succeeded", "in_flight")
).map(_bindable)
FINISHED_COLUMNS = (
    "state",
    "context",
    "data",
    "scope",
    "moves",
    "key",
    "created_at",
    "last_trigger",
    "last_actor",
    "last_detail",
    "last_context",
)


@pytest.mark.parametrize("kind", DATABASES)
@given(column=st.sampled_from(FINISHED_COLUMNS), value=BINDABLE)
def test_fuzz_nothing_changes_a_finished_entity(
    kind: str, column: str, value: Any, request: pytest.FixtureRequest
) -> None:
    """issue 13 item 7, fuzzed: a succeeded key's row takes no value of any type in any
    column (the write is refused, or changes nothing)."""
    victims: Victims = request.getfixturevalue(f"victims_{kind}")
    read = f"SELECT * FROM {OE} WHERE key = 'paid'"
    before = victims.raw.rows(read)
    update = f"UPDATE {OE} SET {column} = {{p}}, version = version + 1 WHERE key = 'paid'"
    refused = victims.raw.attempt([update], (value,), then=read)
    event("refused" if refused is not None else "accepted, nothing changed")
    if refused is None:
        (now,), (then,) = victims.raw.seen, before
        changed = {c for c in now if now[c] != then[c]} - {"version", "updated_at"}
        assert not changed, f"{column} = {value!r} changed {changed}"


def _near_legal_move(
    data: st.DataObject, spec: MachineSpec, state: str, stored: dict[str, str]
) -> tuple[str, str, str, str]:
    """(dest, trigger, actor, context JSON): a legal move from ``state``, then each part
    kept or swapped for another of the machine's names or for garbage, so that legal and
    nearly legal moves are both drawn often."""
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
    legal = [
        (t.dest, t.trigger, a) for t in spec.transitions if t.source == state for a in t.actors
    ]
    dest, trigger, actor = data.draw(st.sampled_from(legal))
    swap = st.integers(0, 3).map(lambda n: n == 0)  # one in four
    if data.draw(swap):
        dest = data.draw(st.sampled_from(list(spec.states)) | text)
    if data.draw(swap):
        trigger = data.draw(st.sampled_from(sorted(spec.triggers)) | text)
    if data.draw(swap):
        actor = data.draw(st.sampled_from(list(spec.actors)) | text)
    context: dict[str, Any] = dict(stored)
    for var, declared in spec.context.items():
        if var not in stored or data.draw(swap):
            choice = data.draw(st.sampled_from([*declared.values, "safe", None, 1, "absent"]))
            if choice == "absent":
                context.pop(var, None)
            else:
                context[var] = choice
    if data.draw(swap):
        context[data.draw(st.sampled_from(["x", "tier", "kind"]))] = "compensable"
    garbled = st.sampled_from(["[]", "{", "null", '"tier"', ""])
    return dest, trigger, actor, data.draw(garbled) if data.draw(swap) else json.dumps(context)


def _legal(
    spec: MachineSpec, row: tuple[str, str], dest: str, trigger: str, actor: str, text: str
) -> bool:
    """The Python rule for the same move: the context a JSON object of strings, its fixed
    variables as stored, and ``spec.step`` leading to ``dest``."""
    state, stored_text = row
    try:
        given = json.loads(text)
        stored = json.loads(stored_text) if isinstance(stored_text, str) else stored_text
    except ValueError:
        return False
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        return False
    derived = set(spec.derivation.context) if spec.derivation else set()
    if any(given.get(v) != stored.get(v) for v in spec.context if v not in derived):
        return False
    try:
        return spec.step(state, trigger, actor=actor, **given) == dest
    except MachinesError:
        return False


@pytest.mark.parametrize("kind", DATABASES)
@pytest.mark.parametrize(
    ("machine", "key"), [("effect", "irr"), ("effect", "comp"), ("request", "req")]
)
@given(data=st.data())
def test_fuzz_a_raw_move_is_taken_exactly_when_the_spec_allows_it(
    kind: str, machine: str, key: str, data: st.DataObject, request: pytest.FixtureRequest
) -> None:
    """The guard of every move, fuzzed: a move written in raw SQL (legal moves with
    their parts swapped for other names or garbage, contexts forged or broken) is
    accepted by the database exactly when ``spec.step`` under the entity's stored
    context allows it."""
    victims: Victims = request.getfixturevalue(f"victims_{kind}")
    spec = victims.store.specs()[machine]
    table = f"{machine}_entities"
    (row,) = victims.raw.query(f"SELECT state, context FROM {table} WHERE key = '{key}'")
    stored = row[1] if isinstance(row[1], dict) else json.loads(row[1])
    dest, trigger, actor, context = _near_legal_move(data, spec, row[0], stored)
    update = (
        f"UPDATE {table} SET state = {{p}}, moves = moves + 1, version = version + 1, "
        "last_trigger = {p}, last_actor = {p}, last_context = {p} "
        f"WHERE key = '{key}'"
    )
    refused = victims.raw.attempt([update], (dest, trigger, actor, context))
    expected = _legal(spec, row, dest, trigger, actor, context)
    event("a legal move" if expected else "an illegal move")
    assert (refused is None) == expected, (dest, trigger, actor, context, refused)

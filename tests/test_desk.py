"""The desk over HTTP (issue 30): every route refuses without a session, with a wrong
role, with a missing, foreign or replayed CSRF token and from another site; hostile input
is refused or shown escaped; a stale page cannot act; two people racing get one winner;
sessions end; sign-in is rate limited; and what a person does is a move the store judges,
which the audit finds clean. On SQLite and PostgreSQL."""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from machines.checks.audit import judge_store
from machines.desk.accounts import FORMAT, AccountsError, add_account, read_accounts, verify
from machines.desk.app import HEADERS, desk_app
from machines.desk.sessions import FAILURES, Sessions
from machines.spec.loader import load
from machines.store import Store, open_store
from machines.systems import ExactlyOnce
from tests.conftest import postgres_schema, store_url

PASSWORD = "correct horse battery"
BUNDLED = [load(name) for name in ("effect", "outcome", "node", "request")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Desk:
    store: Store
    accounts: Path
    clock: Clock
    app: Any

    def client(self) -> TestClient:
        return TestClient(self.app, base_url="http://desk.test", follow_redirects=True)

    def signed_in(self, name: str = "olga") -> TestClient:
        client = self.client()
        page = client.post("/login", data={"name": name, "password": PASSWORD})
        assert page.status_code == 200 and f'id="person">{name}<' in page.text, page.text
        return client


@pytest.fixture(params=["sqlite", "postgres"])
def desk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Desk]:
    with ExitStack() as stack:
        url = (
            stack.enter_context(postgres_schema())
            if request.param == "postgres"
            else store_url("sqlite", tmp_path)
        )
        store = stack.enter_context(open_store(url, BUNDLED))
        accounts = tmp_path / "accounts.json"
        add_account(accounts, "olga", ["operator"], PASSWORD)
        add_account(accounts, "carl", ["caller"], PASSWORD)
        add_account(accounts, "sam", ["signer", "operator"], PASSWORD)
        clock = Clock()
        sessions = Sessions(seconds=600, clock=clock)
        yield Desk(
            store, accounts, clock, desk_app(store, read_accounts(accounts), sessions=sessions)
        )


def parked(store: Store, key: str) -> None:
    row = store.insert("outcome", key)[0]
    store.move(row, "park", actor="worker", detail={"evidence": "lease expired"})


def state_of(store: Store, key: str) -> str:
    with store.transaction() as tx:
        row = tx.get("outcome", key)
    assert row is not None
    return row.state


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def fields_of(page: str, trigger: str, **fields: str) -> dict[str, str]:
    """The fields of the form on ``page`` (an entity's page) for ``trigger`` by the
    operator, with a reason, and ``fields`` over them."""
    version = re.search(r'name="version" value="(\d+)"', page)
    assert version is not None, page
    return {
        "csrf": csrf_of(page),
        "version": version.group(1),
        "trigger": trigger,
        "actor": "operator",
        "reason": "the bank statement shows it",
        **fields,
    }


def form(client: TestClient, key: str, trigger: str, **fields: str) -> dict[str, str]:
    return fields_of(client.get(f"/entity/outcome/{key}").text, trigger, **fields)


ROUTES = [
    ("GET", "/"),
    ("GET", "/entity/outcome/k"),
    ("POST", "/entity/outcome/k/act"),
    ("POST", "/logout"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_page_without_a_session_goes_to_sign_in(desk: Desk, method: str, path: str) -> None:
    parked(desk.store, "k")
    answer = desk.client().request(method, path, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
    assert state_of(desk.store, "k") == "indeterminate"


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/pending"), ("POST", "/api/act")])
def test_every_api_route_without_a_token_is_401(desk: Desk, method: str, path: str) -> None:
    for headers in ({}, {"authorization": "Bearer forged"}, {"authorization": "Basic b2xnYQ=="}):
        answer = desk.client().request(method, path, headers=headers, json={})
        assert answer.status_code == 401


def test_every_answer_carries_the_security_headers(desk: Desk) -> None:
    client = desk.signed_in()
    for path in ("/login", "/", "/entity/outcome/none", "/nowhere", "/api/pending"):
        answer = client.get(path, follow_redirects=False)
        for header, value in HEADERS.items():
            assert answer.headers.get(header) == value, (path, header)


def test_a_person_settles_a_parked_charge_and_the_history_names_them(desk: Desk) -> None:
    parked(desk.store, "charge-1")
    client = desk.signed_in()
    listed = client.get("/")
    assert "charge-1" in listed.text and "indeterminate" in listed.text
    fields = form(client, "charge-1", "decide_landed", result='{"id": "tx-7"}')
    page = client.post("/entity/outcome/charge-1/act", data=fields)
    assert page.status_code == 200 and 'id="state">succeeded<' in page.text
    row = ExactlyOnce(desk.store).outcome("charge-1")
    assert row is not None and row.data["result"] == {"id": "tx-7"}
    last = desk.store.transaction
    with last() as tx:
        event = tx.history("outcome", "charge-1")[-1]
    assert (event.actor, event.detail["by"]) == ("operator", "olga")
    assert event.detail["reason"] == "the bank statement shows it"
    assert "charge-1" not in client.get("/").text  # nothing waits any more
    assert judge_store(desk.store.url, {s.name: s for s in BUNDLED}).breaches == []


def test_the_list_refuses_a_query_it_does_not_read_and_a_form_address_is_no_page(
    desk: Desk,
) -> None:
    """Outsider batch 43 (b 29): ``/?machin=outcome`` (a misspelt filter) and ``/?page=abc``
    listed everything with 200, while ``/api/pending`` refused the same. (b 30) A GET of a
    form's address was "no outcome 'charge-3/act' here", 404; it is 405, naming the page
    to open, unless an entity has that very key."""
    parked(desk.store, "charge-3")
    client = desk.signed_in()
    for query, said in (
        ("machin=outcome", "unknown query [&#39;machin&#39;]"),
        ("limit=5", "unknown query [&#39;limit&#39;]"),
        ("page=abc", "page must be a whole number from 1"),
        ("page=0", "page must be a whole number from 1"),
        ("machine=nope&machine=outcome", "given more than once"),
    ):
        answer = client.get(f"/?{query}")
        assert answer.status_code == 400 and said in answer.text, (query, answer.text)
        assert "charge-3" not in answer.text
    assert "charge-3" in client.get("/?machine=outcome&page=1").text
    answer = client.get("/entity/outcome/charge-3/act")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert "a decision on outcome &#39;charge-3&#39; is sent" in answer.text, answer.text
    parked(desk.store, "charge-3/act")  # a key of its own: its page
    assert 'id="state">indeterminate<' in client.get("/entity/outcome/charge-3/act").text


def test_a_person_without_the_role_sees_no_such_move_and_is_refused(desk: Desk) -> None:
    parked(desk.store, "charge-2")
    carl = desk.signed_in("carl")  # a caller: may reclaim, may not decide
    page = carl.get("/entity/outcome/charge-2")
    assert re.findall(r'data-trigger="(\w+)"', page.text) == ["reclaim"]
    fields = form(carl, "charge-2", "decide_not_landed")
    refused = carl.post("/entity/outcome/charge-2/act", data=fields)
    assert refused.status_code == 403 and "you may not decide_not_landed" in refused.text
    assert state_of(desk.store, "charge-2") == "indeterminate"


def test_forms_without_the_sessions_token_or_from_another_site_are_refused(desk: Desk) -> None:
    parked(desk.store, "charge-3")
    olga, other = desk.signed_in(), desk.signed_in()
    fields = form(olga, "charge-3", "decide_landed")
    attempts = [
        ({k: v for k, v in fields.items() if k != "csrf"}, {}),
        ({**fields, "csrf": "forged"}, {}),
        ({**fields, "csrf": csrf_of(other.get("/").text)}, {}),  # another session's token
        (fields, {"origin": "https://evil.example"}),
        (fields, {"sec-fetch-site": "cross-site"}),
    ]
    for data, headers in attempts:
        answer = olga.post("/entity/outcome/charge-3/act", data=data, headers=headers)
        assert answer.status_code == 403, (data, headers)
    assert state_of(desk.store, "charge-3") == "indeterminate"


def test_hostile_reasons_are_refused_or_shown_escaped(desk: Desk) -> None:
    parked(desk.store, "charge-4")
    client = desk.signed_in()
    huge = client.post(
        "/entity/outcome/charge-4/act",
        data=form(client, "charge-4", "reclaim", reason="x" * 100_000),
    )
    assert huge.status_code == 413
    for reason, said in (
        ("a\x00b", "no NUL"),
        ("x" * 2001, "at most 2000"),
        ("   ", "give a reason"),
        ("\u2800 \u303f", "give a reason, with a letter or a digit"),  # batch 35
    ):
        fields = {**form(client, "charge-4", "decide_landed"), "reason": reason}
        answer = client.post("/entity/outcome/charge-4/act", data=fields)
        assert answer.status_code == 400 and said in answer.text
    bad_result = {**form(client, "charge-4", "decide_landed"), "result": "{not json"}
    assert client.post("/entity/outcome/charge-4/act", data=bad_result).status_code == 400
    script = "<script>alert(1)</script> & <img src=x onerror=alert(2)>"
    fields = {**form(client, "charge-4", "decide_not_landed"), "reason": script}
    page = client.post("/entity/outcome/charge-4/act", data=fields)
    assert page.status_code == 200 and "<script>alert" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;img" in page.text


def test_a_key_that_reads_reversed_is_shown_escaped(desk: Desk) -> None:
    """Outsider batch 24 (b, noted): a key holding U+202E (a right-to-left override) was
    shown raw, so it could pass for another key; ``machines pending`` escapes it. Every
    text the desk shows is escaped the same way."""
    key = "refund-\u202egpj.exe"
    parked(desk.store, key)
    page = desk.signed_in().get("/").text
    assert "\u202e" not in page and "refund-\\u202egpj.exe" in page, page


@pytest.mark.parametrize("key", [".", "..", "nl\nkey", "\n", "crlf\r\nkey"])
def test_a_key_no_path_can_carry_can_be_opened_and_acted_on(desk: Desk, key: str) -> None:
    """Outsider batch 30 (b 3): an entity keyed "." or ".." was listed, but a browser drops
    such a path segment (/entity/outcome/.. is /entity/), so no person could open it or act
    on it. Batch 34 (b 15): a key with a line break was listed, and its page and form were
    a bare 404 (the route's path pattern matches no line break). Their links carry the key
    in the query; followed as a browser would, they work."""
    from urllib.parse import urlencode, urljoin

    parked(desk.store, key)
    client = desk.signed_in()
    links = re.findall(r'class="entity" href="([^"]+)"', client.get("/").text)
    in_query = urlencode({"key": key})
    (link,) = [h for h in links if h.endswith(in_query)]
    assert urljoin("http://desk/", link) == f"http://desk{link}"  # no dot segment to drop
    page = client.get(link)
    assert page.status_code == 200 and 'id="state">indeterminate<' in page.text
    action = re.search(r'<form[^>]*action="([^"]+/act[^"]*)"', page.text)
    assert action is not None and urljoin("http://desk/", action.group(1)).endswith(
        f"/act?{in_query}"
    )
    done = client.post(action.group(1), data=fields_of(page.text, "decide_not_landed"))
    assert done.status_code == 200 and 'id="state">failed<' in done.text, done.text


def test_a_stale_page_cannot_act_and_two_people_racing_get_one_winner(desk: Desk) -> None:
    parked(desk.store, "charge-5")
    olga, olga_again = desk.signed_in(), desk.signed_in()
    first = form(olga, "charge-5", "decide_landed")
    second = form(olga_again, "charge-5", "decide_not_landed")
    answers: list[Any] = []

    def post(client: TestClient, data: dict[str, str]) -> None:
        answers.append(client.post("/entity/outcome/charge-5/act", data=data))

    threads = [
        threading.Thread(target=post, args=(olga, first)),
        threading.Thread(target=post, args=(olga_again, second)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 409], codes
    loser = next(a for a in answers if a.status_code == 409)
    assert "changed since the page was shown" in loser.text
    with desk.store.transaction() as tx:
        decided = [e for e in tx.history("outcome", "charge-5") if e.actor == "operator"]
    assert len(decided) == 1
    again = olga.post("/entity/outcome/charge-5/act", data=first)  # the page as it was
    assert again.status_code == 409 and "changed since the page was shown" in again.text


def test_a_decision_never_lands_on_an_attempt_made_after_the_page_was_checked(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 16, 03: the system moves the entity between the desk's own version
    check and the system's call (here another operator reclaims the charge, it runs
    again and parks again: the same state, a later attempt). The person decided on the
    first attempt; the system call carries the version they saw, so nothing lands."""
    from machines.desk import acting

    parked(desk.store, "charge-6")
    olga = desk.signed_in()
    fields = form(olga, "charge-6", "decide_landed", result="7")
    real = acting.offered

    def offered_then_moved(store: Store, row: Any, roles: Any) -> Any:
        moves = real(store, row, roles)
        ExactlyOnce(store).reclaim("charge-6", by="dana", reason="safe to repeat")
        with store.transaction() as tx:
            again = tx.get("outcome", "charge-6")
            assert again is not None
            tx.move(again, "park", actor="worker", detail={"evidence": "lease expired"})
        return moves

    monkeypatch.setattr(acting, "offered", offered_then_moved)
    answer = olga.post("/entity/outcome/charge-6/act", data=fields)
    assert answer.status_code == 409 and "changed since the page was shown" in answer.text
    with desk.store.transaction() as tx:
        history = tx.history("outcome", "charge-6")
    assert [e.trigger for e in history][-2:] == ["reclaim", "park"]
    assert state_of(desk.store, "charge-6") == "indeterminate"


def test_a_session_ends_when_unused_and_when_signed_out(desk: Desk) -> None:
    client = desk.signed_in()
    desk.clock.now += 601
    assert client.get("/", follow_redirects=False).status_code == 303
    client = desk.signed_in()
    cookie = client.cookies.get("machines_desk")
    page = client.get("/")
    client.post("/logout", data={"csrf": csrf_of(page.text)})
    replay = desk.client()
    replay.cookies.set("machines_desk", cookie or "")
    assert replay.get("/", follow_redirects=False).status_code == 303


def test_signing_in_is_rate_limited_per_name_and_address(desk: Desk) -> None:
    client = desk.client()
    for _ in range(FAILURES):
        assert (
            client.post("/login", data={"name": "olga", "password": "nope nope nope"}).status_code
            == 401
        )
    refused = client.post("/login", data={"name": "olga", "password": PASSWORD})
    assert refused.status_code == 429 and "too many" in refused.text
    desk.clock.now += 301
    assert desk.signed_in()


def test_the_api_lists_and_acts_with_a_token(desk: Desk) -> None:
    parked(desk.store, "charge-6")
    client = desk.client()
    for wrong in ("wrong one!!!!", "\\ud800 a lone surrogate"):  # batch 41 c 33
        body = '{"name": "olga", "password": "' + wrong + '"}'
        answer = client.post(
            "/api/token", content=body.encode(), headers={"content-type": "application/json"}
        )
        assert answer.status_code == 401, answer.text
    extra = client.post(  # batch 44 b 33: a field it does not read was ignored
        "/api/token", json={"name": "olga", "password": PASSWORD, "otp": "123456"}
    )
    assert extra.status_code == 400 and "unknown fields ['otp']" in extra.text, extra.text
    token = client.post("/api/token", json={"name": "olga", "password": PASSWORD}).json()["token"]
    auth = {"authorization": f"Bearer {token}"}
    pending = client.get("/api/pending", headers=auth).json()["pending"]
    (entry,) = [p for p in pending if p["key"] == "charge-6"]
    for query, said in (  # batch 42 (c 4f, 4g)
        ("limit=-1", "limit must be a whole number from 1 to 1,000, not '-1'"),
        ("limit=0", "limit must be a whole number from 1 to 1,000"),
        ("limit=100000000000000000000", "from 1 to 1,000"),
        ("offset=-1", "offset must be a whole number from 0"),
        ("machin=outcome", "unknown query ['machin']"),
        ("machine=nope&machine=outcome", "['machine'] given more than once"),  # batch 44 b 32
        ("limit=0&limit=1", "['limit'] given more than once"),
    ):
        answer = client.get(f"/api/pending?{query}", headers=auth)
        assert answer.status_code == 400 and said in answer.json()["error"], answer.text
    assert len(client.get("/api/pending?limit=1", headers=auth).json()["pending"]) == 1
    body = {
        "machine": "outcome",
        "key": "charge-6",
        "version": entry["version"],
        "trigger": "decide_not_landed",
        "actor": "operator",
        "reason": "the bank never received it",
    }
    # outsider batch 17 (b02): a field the API does not read is refused, never dropped
    for extra in ({"results": {"id": "tx-7"}}, {"by": "root"}, {"seen": 1}):
        refused = client.post("/api/act", json={**body, **extra}, headers=auth)
        assert refused.status_code == 400 and "unknown fields" in refused.text, refused.text
    wrong = client.post("/api/act", json={**body, "result": {"id": "x"}}, headers=auth)
    assert wrong.status_code == 400 and "a result goes only with" in wrong.text
    # outsider batch 22 (b B5): a version given as a text ("2", " 2 ", "+2") was taken
    for spelled in (str(entry["version"]), f" {entry['version']} ", f"+{entry['version']}"):
        text = client.post("/api/act", json={**body, "version": spelled}, headers=auth)
        assert text.status_code == 400 and "not a whole number" in text.text, text.text
    done = client.post("/api/act", json=body, headers=auth)
    assert done.status_code == 200 and done.json()["state"] == "failed"
    assert client.post("/api/act", json=body, headers=auth).status_code == 409  # stale now
    for hostile in ([], "x", {**body, "version": "NaN"}, {**body, "reason": 5}):
        assert client.post("/api/act", json=hostile, headers=auth).status_code == 400
    # outsider batch 41 (c 31): every refusal was 409, which a script retries after a read
    for wrong, status in (
        ({**body, "version": True}, 400),
        ({**body, "version": 2.0}, 400),
        ({**body, "machine": "nope"}, 404),
        ({**body, "key": "nope"}, 404),
        ({**body, "key": "k\x00"}, 400),  # batch 42 (c 4d): these three were 409
        ({**body, "key": "k" * 5000}, 400),
    ):
        answer = client.post("/api/act", json=wrong, headers=auth)
        assert answer.status_code == status, (wrong, answer.text)
    surrogate = json.dumps({**body, "reason": "ok"}).replace('"ok"', '"ok \\ud800"')
    answer = client.post(
        "/api/act",
        content=surrogate.encode(),
        headers={**auth, "content-type": "application/json"},
    )
    assert answer.status_code == 400, answer.text


def test_a_form_field_the_desk_does_not_read_is_refused(desk: Desk) -> None:
    """Outsider batch 17 (b02): a form with a field no page sends, or a result with a move
    that records none, was acted on with the field dropped."""
    parked(desk.store, "charge-7")
    olga = desk.signed_in()
    extra = olga.post(
        "/entity/outcome/charge-7/act", data=form(olga, "charge-7", "decide_landed", by="root")
    )
    assert extra.status_code == 400 and "unknown form fields" in extra.text
    dropped = olga.post(
        "/entity/outcome/charge-7/act",
        data=form(olga, "charge-7", "decide_not_landed", result='{"id": 1}'),
    )
    assert dropped.status_code == 400 and "a result goes only with" in dropped.text
    # batch 42 (c 4e): a field given twice, or bytes that are not UTF-8, were "too large"
    fields = form(olga, "charge-7", "decide_landed")
    encoded = "&".join(f"{k}={v}" for k, v in fields.items())
    kind = {"content-type": "application/x-www-form-urlencoded"}
    for body, said in (
        (encoded + "&version=1", "the form gives &#39;version&#39; more than once"),
        (encoded.replace("reason=", "reason=ok%ff"), "a field of the form is not UTF-8"),
        (encoded.encode() + b"\xff", "the form is not UTF-8"),
    ):
        content = body if isinstance(body, bytes) else body.encode()
        answer = olga.post("/entity/outcome/charge-7/act", content=content, headers=kind)
        assert answer.status_code == 400 and said in answer.text, answer.text[-400:]
    assert state_of(desk.store, "charge-7") == "indeterminate"


def test_a_store_error_is_a_page_never_a_traceback(
    desk: Desk, caplog: pytest.LogCaptureFixture
) -> None:
    client = desk.signed_in()
    for path in (
        "/entity/nomachine/k",
        "/entity/outcome/" + "k" * 5000,
        "/?machine=outcome&state=x",
    ):
        answer = client.get(path)
        assert answer.status_code in (400, 404) and "Traceback" not in answer.text, path

    def broken() -> Any:
        raise RuntimeError("the database went away: password=hunter2")

    desk.store.transaction = broken  # type: ignore[method-assign]
    answer = client.get("/")
    assert (
        answer.status_code == 500
        and "hunter2" not in answer.text
        and "Traceback" not in answer.text
    )
    # the page says "see its log": the log has it (outsider batch 45, b 37: it had nothing)
    logged = [r for r in caplog.records if r.name == "machines.desk"]
    assert logged and logged[-1].exc_info is not None and "GET /" in logged[-1].getMessage()


def test_accounts_keep_only_a_hash_and_refuse_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "accounts.json"
    add_account(path, "ana", ["operator"], PASSWORD)
    text = path.read_text()
    assert PASSWORD not in text and "$argon2id$" in text
    assert path.stat().st_mode & 0o077 == 0
    accounts = read_accounts(path)
    assert verify(accounts, "ana", PASSWORD) is not None
    assert verify(accounts, "ana", PASSWORD + "!") is None
    assert verify(accounts, "nobody", PASSWORD) is None
    for name, roles, password in (
        ("a b", ["operator"], PASSWORD),
        ("ana", ["Op"], PASSWORD),
        ("ana", ["operator"], "short"),
    ):
        with pytest.raises(AccountsError):
            add_account(path, name, roles, password)
    forged = {"format": FORMAT, "accounts": {"x": {"roles": ["operator"], "hash": "plain"}}}
    path.write_text(json.dumps(forged))
    with pytest.raises(AccountsError, match="not an Argon2id hash"):
        read_accounts(path)


def test_an_operator_settles_a_parked_charge_and_a_stuck_transfer_and_the_audit_names_them(
    desk: Desk, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's test: a charge parked by a lease that expired, and a transfer stopped in
    manual_intervention with its withdrawal's fate unknown; the operator finds both, settles
    each through the definitions, and the audit is clean and names both decisions."""
    from machines.cli import main
    from machines.testing.transfer.suite import plan_node
    from tests.test_transfer import FakeVenue, drive, engine_for, executing

    parked(desk.store, "charge-9")
    venue = FakeVenue(
        {
            "withdraw": {"submit": [TimeoutError("no answer from the exchange")]},
            "balance_check": {"observe": ["pending", "failed"]},
        }
    )
    engine = engine_for(desk.store, venue)
    plan = [
        plan_node("withdraw", "action", True),
        plan_node("balance_check", "observe", False),
        plan_node("deposit_observe", "observe", False, "withdraw", "balance_check"),
    ]
    executing(engine, "t-1", plan)
    assert drive(engine, "t-1") == "manual_intervention"
    olga = desk.signed_in()
    listed = olga.get("/").text
    assert "charge-9" in listed and "t-1" in listed and "manual_intervention" in listed
    olga.post("/entity/outcome/charge-9/act", data=form(olga, "charge-9", "decide_not_landed"))
    page = olga.get("/entity/request/t-1")
    assert re.findall(r'data-trigger="(\w+)"', page.text) == [
        "resume",
        "confirm_failed",
        "confirm_completed",
    ]
    fields = fields_of(
        page.text, "confirm_failed", reason="the exchange confirms the withdrawal was returned"
    )
    settled = olga.post("/entity/request/t-1/act", data=fields)
    assert 'id="state">failed<' in settled.text
    assert "t-1" not in olga.get("/").text and "charge-9" not in olga.get("/").text
    capsys.readouterr()
    code = main(["audit", "--from-store", desk.store.url, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["breaches"] == []
    named = {(p["machine"], p["key"], p["trigger"], p["by"]) for p in report["people"]}
    assert ("outcome", "charge-9", "decide_not_landed", "olga") in named
    assert ("request", "t-1", "confirm_failed", "olga") in named
    assert main(["audit", "--from-store", desk.store.url]) == 0
    said = capsys.readouterr().out
    assert "request 't-1': confirm_failed by olga as operator" in said


def test_what_waits_is_derived_from_the_definitions_per_entity_context(desk: Desk) -> None:
    """A state waits on a person when a person may move it and a program can only end it
    (or it is tagged needs-human), judged under each entity's own context: an Irreversible
    call pending waits for a human, a Compensable one is the proxy's to run."""
    from machines.desk.waiting import waiting, waiting_states

    specs = desk.store.specs()
    assert {m: waiting_states(specs[m]) for m in sorted(specs)} == {
        "effect": ("pending",),
        "node": (),
        "outcome": ("indeterminate",),
        "request": ("pending_approval", "waiting_manual_action", "manual_intervention"),
    }
    desk.store.insert("effect", "rm -rf", context={"tier": "irreversible"})
    desk.store.insert("effect", "write tmp", context={"tier": "compensable"})
    parked(desk.store, "charge-w")
    listed = {(w.machine, w.row.key) for w in waiting(desk.store)}
    assert listed == {("effect", "rm -rf"), ("outcome", "charge-w")}
    page = desk.signed_in().get("/").text
    assert "rm -rf" in page and "write tmp" not in page


def test_a_users_own_machine_waits_and_moves_by_its_own_definition(tmp_path: Path) -> None:
    """No list is kept by hand: a user's machine gets its waiting states and its people's
    moves from its definition, and a move of the store records the person."""
    (tmp_path / "refund.yaml").write_text(
        (Path(__file__).parent / "user_project" / "specs" / "refund.yaml").read_text()
    )
    refund = load(tmp_path / "refund.yaml")
    accounts = tmp_path / "accounts.json"
    add_account(accounts, "ann", [a for a, r in refund.actors.items() if not r.automatic], PASSWORD)
    with open_store(store_url("sqlite", tmp_path), [refund]) as store:
        from machines.desk.waiting import waiting_states

        states = waiting_states(refund)
        assert states, "the refund machine has states only people move on"
        assert states == ("awaiting_approval", "unknown")
        row = store.insert("refund", "r-1", context={"size": "large"})[0]
        store.move(row, "hold", actor="service", detail={"why": "large"})
        client = TestClient(desk_app(store, read_accounts(accounts)), base_url="http://desk.test")
        client.post("/login", data={"name": "ann", "password": PASSWORD})
        assert "r-1" in client.get("/").text
        page = client.get("/entity/refund/r-1")
        assert re.findall(r'data-trigger="(\w+)"', page.text) == ["approve", "reject"]
        fields = {
            "csrf": csrf_of(page.text),
            "version": "2",
            "trigger": "approve",
            "actor": "approver",
            "reason": "the customer's receipt checks out",
        }
        done = client.post("/entity/refund/r-1/act", data=fields)
        assert 'id="state">sending<' in done.text
        with store.transaction() as tx:
            event = tx.history("refund", "r-1")[-1]
        assert (event.actor, event.detail) == (
            "approver",
            {"by": "ann", "reason": "the customer's receipt checks out"},
        )


def test_a_desk_running_across_a_migration_answers_nothing_from_its_old_definitions(
    tmp_path: Path,
) -> None:
    """Outsider batch 45 (b 37): a desk left running while ``machines migrate`` renamed a
    waiting state said "Nothing waits.", refused a right approval as the person's lack of
    a role, and answered 500 on the entity's page. Each request
    now first checks that the store serves the definitions the desk started with: a page
    is 503 naming the machine and its versions, the API the same in JSON, and nothing is
    done; a desk started on the new definitions serves them."""
    from machines.store.migration import StateMap, migrate

    source = (Path(__file__).parent / "user_project" / "specs" / "refund.yaml").read_text()
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "v1" / "refund.yaml").write_text(source)
    (tmp_path / "v2" / "refund.yaml").write_text(
        source.replace("awaiting_approval", "waiting_for_approval")
    )
    v1, v2 = load(tmp_path / "v1" / "refund.yaml"), load(tmp_path / "v2" / "refund.yaml")
    accounts = tmp_path / "accounts.json"
    add_account(accounts, "ann", [a for a, r in v1.actors.items() if not r.automatic], PASSWORD)
    url = store_url("sqlite", tmp_path)
    with open_store(url, [v1]) as store:
        row = store.insert("refund", "r-1", context={"size": "large"})[0]
        store.move(row, "hold", actor="service", detail={"why": "large"})
        client = TestClient(desk_app(store, read_accounts(accounts)), base_url="http://desk.test")
        client.post("/login", data={"name": "ann", "password": PASSWORD})
        token = client.post("/api/token", json={"name": "ann", "password": PASSWORD}).json()
        bearer = {"authorization": f"Bearer {token['token']}"}
        assert "r-1" in client.get("/").text
        plan = migrate(
            url, {"refund": v2}, [StateMap("refund", "awaiting_approval", "waiting_for_approval")]
        )
        assert plan.applied
        said = (
            "the store's definitions changed since this desk started "
            "(refund was at version 1, now at version 2"
        )
        for page in (client.get("/"), client.get("/entity/refund/r-1")):
            assert page.status_code == 503 and said in html.unescape(page.text), page.text
        pending = client.get("/api/pending", headers=bearer)
        assert pending.status_code == 503 and said in pending.json()["error"]
        acted = client.post(
            "/api/act",
            headers=bearer,
            json={
                "machine": "refund",
                "key": "r-1",
                "version": 2,
                "trigger": "approve",
                "actor": "approver",
                "reason": "the receipt checks out",
            },
        )
        assert acted.status_code == 503
    with open_store(url, [v2]) as store:
        with store.transaction() as tx:
            stored = tx.get("refund", "r-1")
        assert stored is not None and stored.state == "waiting_for_approval"
        fresh = TestClient(desk_app(store, read_accounts(accounts)), base_url="http://desk.test")
        fresh.post("/login", data={"name": "ann", "password": PASSWORD})
        assert "r-1" in fresh.get("/").text


def test_a_refused_move_is_answered_by_whose_fault_it_is(tmp_path: Path) -> None:
    """Outsider batch 45 (b 32): a misspelt trigger and an approval of a refund already
    sending were both 403 "your roles may not", where the guide says 400 for a wrong
    request and 409 for a move the entity's state refuses now. Now: a trigger or actor
    the definition lacks is 400 (with the name meant), an actor none of the person's roles
    403, a move of their role that the state refuses now 409."""
    refund = load(Path(__file__).parent / "user_project" / "specs" / "refund.yaml")
    accounts = tmp_path / "accounts.json"
    add_account(accounts, "ann", ["approver"], PASSWORD)
    with open_store(store_url("sqlite", tmp_path), [refund]) as store:
        row = store.insert("refund", "r-1", context={"size": "large"})[0]
        row = store.move(row, "hold", actor="service", detail={"why": "large"})
        row = store.move(row, "approve", actor="approver", detail={"by": "bo", "reason": "ok"})
        client = TestClient(desk_app(store, read_accounts(accounts)), base_url="http://desk.test")
        token = client.post("/api/token", json={"name": "ann", "password": PASSWORD}).json()
        bearer = {"authorization": f"Bearer {token['token']}"}
        body = {"machine": "refund", "key": "r-1", "version": row.version, "reason": "again"}
        for fields, status, said in (
            ({"trigger": "aprove", "actor": "approver"}, 400, "did you mean 'approve'"),
            ({"trigger": "approve", "actor": "aprover"}, 400, "did you mean 'approver'"),
            ({"trigger": "send", "actor": "service"}, 403, "service is none of your roles"),
            ({"trigger": "approve", "actor": "approver"}, 409, "in sending"),
            # outsider batch 46 (b 15, b 16, b 21)
            ({"trigger": "send", "actor": "service", "version": 1}, 403, "none of your roles"),
            ({"trigger": "approve", "actor": "approver", "version": 99}, 409, "none it has had"),
            ({"trigger": "confirm", "actor": "approver"}, 403, "make confirm from no state"),
        ):
            answer = client.post("/api/act", headers=bearer, json={**body, **fields})
            assert answer.status_code == status and said in answer.json()["error"], answer.text
        with store.transaction() as tx:
            stored = tx.get("refund", "r-1")
        assert stored is not None and stored.version == row.version


def moves_on(client: TestClient, machine: str, key: str) -> list[tuple[str, str]]:
    page = client.get(f"/entity/{machine}/{quote(key, safe='')}").text
    return re.findall(r'data-trigger="(\w+)"(?: data-gate="(\w+)")?', page)


def act_on(
    desk: Desk, client: TestClient, machine: str, key: str, trigger: str, **fields: str
) -> Any:
    """Post a move as the entity's page would, also one the page does not offer."""
    path = f"/entity/{machine}/{quote(key, safe='')}"
    from machines.desk.waiting import page_version

    page = client.get(path).text
    with desk.store.transaction() as tx:
        row = tx.get(machine, key)
        assert row is not None
        version = page_version(desk.store.specs(), tx, row)  # the page may offer no form
    data = {
        "csrf": csrf_of(page),
        "version": str(version),
        "trigger": trigger,
        "actor": "operator",
        "reason": "done by hand, ticket 42",
        **fields,
    }
    return client.post(f"{path}/act", data=data)


def test_a_transfer_is_cancelled_only_while_no_money_moves_as_its_engine_derives(
    desk: Desk,
) -> None:
    """cancel's guard reads side_effects, which the engine derives from the nodes: the
    desk offers it while nothing with a side effect started, and not after; a lone node's
    cancel (part of cancelling its request) is not offered on the node's page."""
    from machines.testing.transfer.suite import plan_node
    from tests.test_transfer import FakeVenue, engine_for, executing

    engine = engine_for(desk.store, FakeVenue({"withdraw": {"observe": ["pending"]}}))
    plan = [plan_node("check", "observe", False), plan_node("withdraw", "action", True, "check")]
    executing(engine, "t-idle", plan)
    executing(engine, "t-moving", plan)
    for _ in range(4):
        engine.step("t-moving")
    assert engine.nodes("t-moving")["withdraw"].state.value in ("submitted", "observing")
    olga = desk.signed_in()
    assert ("cancel", "") in moves_on(olga, "request", "t-idle")
    assert moves_on(olga, "node", "t-idle/withdraw") == []  # blocked: cancel is the request's
    assert ("cancel", "") not in moves_on(olga, "request", "t-moving")
    refused = act_on(desk, olga, "request", "t-moving", "cancel")
    assert refused.status_code == 409 and "may not cancel" in refused.text  # not now
    done = act_on(desk, olga, "request", "t-idle", "cancel")
    assert done.status_code == 200 and 'id="state">cancelled<' in done.text
    assert {n.state.value for n in engine.nodes("t-idle").values()} == {"cancelled"}
    assert judge_store(desk.store.url, {s.name: s for s in BUNDLED}).breaches == []


def test_a_transfer_waiting_on_a_gate_resumes_by_the_gate_and_its_engine_runs_it_on(
    desk: Desk,
) -> None:
    """In waiting_manual_action a bare resume would go straight back: the desk offers one
    resume per ready gate, records the person's action on the gate, and the service's
    engine (which has the executors) passes it on its next step."""
    from machines.testing.transfer.suite import plan_node
    from tests.test_transfer import FakeVenue, engine_for, executing

    engine = engine_for(desk.store, FakeVenue())
    plan = [
        plan_node("withdraw", "action", True),
        plan_node("manual_confirm", "action", False, "withdraw", executor="gate"),
        plan_node("deposit_observe", "observe", False, "manual_confirm"),
    ]
    executing(engine, "t-gate", plan)
    assert engine.run("t-gate") == "waiting_manual_action"
    olga = desk.signed_in()
    assert moves_on(olga, "request", "t-gate") == [("resume", "manual_confirm")]
    forged = act_on(desk, olga, "request", "t-gate", "resume", gate="deposit_observe")
    assert forged.status_code == 409 and "by gate &#39;deposit_observe&#39;" in forged.text
    bare = act_on(desk, olga, "request", "t-gate", "resume")
    assert bare.status_code == 409
    done = act_on(desk, olga, "request", "t-gate", "resume", gate="manual_confirm")
    assert done.status_code == 200 and 'id="state">executing<' in done.text
    assert engine.nodes("t-gate")["manual_confirm"].data["manual"]["by"] == "olga"
    assert engine.run("t-gate") == "completed"
    assert judge_store(desk.store.url, {s.name: s for s in BUNDLED}).breaches == []


def test_a_signature_is_not_the_desks_and_a_gates_resume_keeps_the_reason(desk: Desk) -> None:
    """Outsider batch 17 (b01, b19): signing from the desk recorded the node as sent
    (``submitting``) and then failed, with no executor to send it, so that the money later
    read "may have moved" though nothing was sent; and a resume by a gate dropped the
    reason the person gave. Signing is not offered (the service's engine signs and sends
    in one call; an engine without the executor refuses before writing), a refusal still
    is, and the person's reason is kept on the resume and on the gate."""
    from machines.systems.transfer import TransferConfigError, TransferEngine
    from machines.testing.transfer.suite import plan_node
    from tests.test_transfer import FakeVenue, engine_for, executing

    engine = engine_for(desk.store, FakeVenue({"withdraw": {"prepare": ["sign"]}}))
    executing(engine, "t-sig", [plan_node("withdraw", "action", True)])
    engine.run("t-sig")
    sam = desk.signed_in("sam")
    assert moves_on(sam, "node", "t-sig/withdraw") == [("fail", "")]
    forged = act_on(desk, sam, "node", "t-sig/withdraw", "sign", actor="signer")
    assert forged.status_code == 409, forged.text  # the service's engine signs
    with pytest.raises(TransferConfigError, match="which this engine does not have"):
        TransferEngine(desk.store, {}).sign("t-sig", "withdraw", by="hsm")
    assert engine.nodes("t-sig")["withdraw"].state == "awaiting_signature"
    gate_engine = engine_for(desk.store, FakeVenue())
    plan = [
        plan_node("withdraw", "action", True),
        plan_node("manual_confirm", "action", False, "withdraw", executor="gate"),
    ]
    executing(gate_engine, "t-gate2", plan)
    assert gate_engine.run("t-gate2") == "waiting_manual_action"
    done = act_on(
        desk,
        sam,
        "request",
        "t-gate2",
        "resume",
        gate="manual_confirm",
        reason="called the bank, ticket OPS-4411",
    )
    assert done.status_code == 200, done.text
    with desk.store.transaction() as tx:
        resumed = tx.history("request", "t-gate2")[-1].detail or {}
        gate = tx.history("node", "t-gate2/manual_confirm")[-1].detail or {}
    assert "OPS-4411" in resumed["reason"] and "OPS-4411" in gate["reason"]


def test_machines_pending_lists_what_waits_as_text_and_as_its_schemas_document(
    desk: Desk, capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    from machines.cli import main
    from machines.cli.output import schema
    from machines.store.records import shown_url

    parked(desk.store, "charge-p")
    desk.store.insert("effect", "drop table", context={"tier": "irreversible"})
    assert main(["pending", desk.store.url]) == 0
    said = capsys.readouterr().out
    assert "outcome indeterminate: 1" in said and "charge-p in indeterminate" in said
    assert main(["pending", desk.store.url, "--format", "json", "--machine", "effect"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema("pending")).validate(doc)
    assert [(p["machine"], p["key"]) for p in doc["pending"]] == [("effect", "drop table")]
    assert {(c["machine"], c["state"], c["entities"]) for c in doc["counts"]} == {
        ("effect", "pending", 1),
        ("outcome", "indeterminate", 1),
    }
    assert doc["store"] == shown_url(desk.store.url)
    for argv in (["--machine", "nope"], ["--state", "pending"]):
        assert main(["pending", desk.store.url, "--format", "json", *argv]) == 2
        failure = json.loads(capsys.readouterr().out)
        jsonschema.Draft202012Validator(schema("pending")).validate(failure)
        assert failure["exit_code"] == 2 and failure["error"]


def test_outsider_batch_16_sign_in_from_another_site_duplicate_keys_and_huge_bodies(
    desk: Desk,
) -> None:
    """Another site cannot sign a browser in (nor ask a token); a JSON body that gives a
    key twice is refused, not decided by its last one; a body over the limit is refused
    by its declared length before it is read."""
    client = desk.client()
    crossed = client.post(
        "/login",
        data={"name": "olga", "password": PASSWORD},
        headers={"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
    )
    assert crossed.status_code == 403 and "machines_desk" not in client.cookies
    token = client.post(
        "/api/token",
        json={"name": "olga", "password": PASSWORD},
        headers={"origin": "https://evil.example"},
    )
    assert token.status_code == 403
    parked(desk.store, "charge-d")
    auth = {
        "authorization": "Bearer "
        + client.post("/api/token", json={"name": "olga", "password": PASSWORD}).json()["token"]
    }
    body = (
        '{"machine": "outcome", "key": "charge-d", "version": 2, "trigger": '
        '"decide_not_landed", "actor": "operator", "reason": "r", "trigger": "decide_landed"}'
    )
    twice = client.post("/api/act", content=body, headers=auth)
    assert twice.status_code == 400 and state_of(desk.store, "charge-d") == "indeterminate"
    huge = client.post("/api/token", content=b"{}", headers={"content-length": str(10**9)})
    assert huge.status_code in (400, 401, 413)


def test_machines_pending_refuses_a_tampered_store(
    desk: Desk, capsys: pytest.CaptureFixture[str]
) -> None:
    from machines.cli import main

    if not desk.store.url.startswith("sqlite"):
        pytest.skip("one database shows it; the read-only check is the same")
    import sqlite3

    parked(desk.store, "charge-t")
    path = desk.store.url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        raw.execute('DROP TRIGGER "outcome_entities_legal_move"')
    assert main(["pending", desk.store.url]) == 2
    assert "outcome_entities_legal_move" in capsys.readouterr().err


def test_a_time_no_clock_gives_is_refused_or_named_never_a_traceback(
    desk: Desk, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (a07): a waiting entity whose last write time was set to
    ``-Infinity`` by raw SQL made ``machines pending`` end in an OverflowError traceback.
    Since batch 19 (a03) the database refuses a time that is no number; one let in with
    SQLite's checks switched off (an owner power) is left out of ``pending`` (it stops no
    other entity, batch 21) and named by the audit (exit 1), never a traceback."""
    import sqlite3

    from machines.cli import main

    parked(desk.store, "charge-inf")
    infinite = "-9e999" if desk.store.url.startswith("sqlite") else "'-Infinity'::float8"
    statement = (
        f'UPDATE "outcome_entities" SET updated_at = {infinite}, version = version + 1 '
        "WHERE key = 'charge-inf'"
    )
    if not desk.store.url.startswith("sqlite"):
        import psycopg

        with (
            psycopg.connect(desk.store.url, autocommit=True) as pg,
            pytest.raises(psycopg.errors.CheckViolation),
        ):
            pg.execute(statement.encode())
        return
    with sqlite3.connect(desk.store.url.removeprefix("sqlite:///")) as raw:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            raw.execute(statement)
        raw.execute("PRAGMA ignore_check_constraints = ON")
        raw.execute(statement)
    capsys.readouterr()
    assert main(["pending", desk.store.url]) == 0  # left out (batch 21): the audit names it
    said = capsys.readouterr()
    assert "charge-inf" not in said.out and "Traceback" not in said.out + said.err
    assert main(["audit", "--from-store", desk.store.url]) == 1
    assert "[append-only-history] outcome 'charge-inf': cannot be read" in capsys.readouterr().out


def test_add_account_while_the_desk_serves_takes_effect_at_once(desk: Desk) -> None:
    """Outsider batch 17 (b03): the running desk kept the accounts it read at start: after
    add-account changed olga's password and roles, the old password still got a token and
    the page still showed her old roles. The file is read again when it changes; a session
    whose password changed ends, and one whose roles changed has the new ones."""
    carl = desk.signed_in("carl")
    olga = desk.signed_in("olga")
    new = "another long password"
    add_account(desk.accounts, "olga", ["caller"], new)
    document = json.loads(desk.accounts.read_text(encoding="utf-8"))
    document["accounts"]["carl"]["roles"] = ["caller", "operator"]  # his password kept
    desk.accounts.write_text(json.dumps(document), encoding="utf-8")
    client = desk.client()
    old = client.post("/api/token", json={"name": "olga", "password": PASSWORD})
    assert old.status_code == 401
    assert client.post("/api/token", json={"name": "olga", "password": new}).status_code == 200
    assert 'id="person">olga<' not in olga.get("/").text  # her session ended
    assert "(caller, operator)" in carl.get("/").text  # his roles are the file's now


def test_signing_out_from_an_older_tab_ends_the_session(desk: Desk) -> None:
    """Outsider batch 17 (b24): "Sign out" on a page whose form carried an older session's
    token said "signed out" and deleted the cookie, while the server kept the session."""
    from machines.desk.app import COOKIE

    olga = desk.signed_in()
    page = olga.get("/").text
    assert 'id="person">olga<' in page
    cookie = olga.cookies.get(COOKIE)
    assert cookie
    olga.post("/logout", data={"csrf": csrf_of(page) + "x"})  # a token of another session
    again = desk.client()
    again.cookies.set(COOKIE, cookie)
    assert 'id="person">' not in again.get("/").text
    # batch 18: the tab's own session ends too, when another sign-in took the cookie
    browser = desk.signed_in()
    first_page = browser.get("/").text
    first_cookie = browser.cookies.get(COOKIE)
    browser.post("/login", data={"name": "olga", "password": PASSWORD})  # another tab
    second_cookie = browser.cookies.get(COOKIE)
    assert first_cookie and second_cookie and second_cookie != first_cookie
    browser.post("/logout", data={"csrf": csrf_of(first_page)})
    for stale in (first_cookie, second_cookie):
        other = desk.client()
        other.cookies.set(COOKIE, stale)
        assert 'id="person">' not in other.get("/").text


def test_a_running_desk_refuses_an_accounts_file_with_a_role_that_is_no_person(
    desk: Desk,
) -> None:
    """Outsider batch 38 (c K3): an accounts file rewritten while the desk served, giving an
    account a role that is no person (an automatic actor, or none at all), let it sign in;
    the desk refuses such a file at start. A running desk reads it as holding no account
    (fail closed) until it is fixed."""
    client = desk.client()
    assert client.post("/api/token", json={"name": "olga", "password": PASSWORD}).status_code == 200
    document = json.loads(desk.accounts.read_text(encoding="utf-8"))
    document["accounts"]["olga"]["roles"] = ["worker"]  # the sweeper: an automatic actor
    desk.accounts.write_text(json.dumps(document), encoding="utf-8")
    refused = client.post("/api/token", json={"name": "olga", "password": PASSWORD})
    assert refused.status_code == 401
    document["accounts"]["olga"]["roles"] = ["operator"]
    desk.accounts.write_text(json.dumps(document), encoding="utf-8")
    assert client.post("/api/token", json={"name": "olga", "password": PASSWORD}).status_code == 200

"""What a person sends as JSON (a form's result, an API body) is read as they wrote it, or
refused naming why (outsider batch 34, b 18): the form stored the result
``{"id": "tx-real", "id": "tx-typo"}`` as ``{"id": "tx-typo"}``, which the API refused, and
both paths stored ``1.0000000000000000000001`` as ``1.0`` without a word."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from machines.desk.accounts import add_account, read_accounts
from machines.desk.acting import person_json
from machines.desk.app import desk_app
from machines.desk.waiting import DeskError
from machines.spec.loader import load
from machines.store import open_store
from machines.store.records import Store
from tests.conftest import store_url
from tests.test_desk import parked, state_of

PASSWORD = "correct horse battery staple"
REFUSED = [
    ('{"id": "tx-real", "id": "tx-typo"}', "gives the key 'id' twice"),
    ('{"a": {"b": 1, "b": 2}}', "gives the key 'b' twice"),
    ('{"amount": 1.0000000000000000000001}', "would be kept as 1.0"),
    ("[1e400]", "would be kept as inf"),
    ('{"x": NaN}', "NaN is not JSON"),
    ("-Infinity", "-Infinity is not JSON"),
    ("{'id': 1}", "it is not JSON"),
]


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    accounts = tmp_path / "accounts.json"
    add_account(accounts, "olga", ["operator"], PASSWORD)
    with open_store(store_url("sqlite", tmp_path), [load("outcome")]) as store:
        client = TestClient(desk_app(store, read_accounts(accounts)), base_url="http://desk.test")
        client.post("/login", data={"name": "olga", "password": PASSWORD})
        yield client, store


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_person_json_refuses_what_it_would_change(text: str, why: str) -> None:
    with pytest.raises(DeskError, match=re.escape(why)):
        person_json(text)


@pytest.mark.parametrize(
    "text", ['{"amount": 0.1}', "1e5", "-0.0", '{"n": 12345678901234567890123}', '"é"']
)
def test_person_json_reads_what_it_keeps_as_written(text: str) -> None:
    import json

    assert person_json(text) == json.loads(text)


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_the_form_refuses_a_result_it_would_change(
    desk: tuple[TestClient, Store], text: str, why: str
) -> None:
    client, store = desk
    parked(store, "dup-1")
    page = client.get("/entity/outcome/dup-1").text
    fields = {
        "csrf": re.findall(r'name="csrf" value="([^"]+)"', page)[0],
        "version": re.findall(r'name="version" value="(\d+)"', page)[0],
        "trigger": "decide_landed",
        "actor": "operator",
        "reason": "the bank statement",
        "result": text,
    }
    answer = client.post("/entity/outcome/dup-1/act", data=fields)
    assert answer.status_code >= 400 and why in html.unescape(answer.text), answer.text
    assert state_of(store, "dup-1") == "indeterminate"


def test_the_api_refuses_a_body_it_would_change_naming_why(desk: tuple[TestClient, Store]) -> None:
    client, store = desk
    parked(store, "api-1")
    token = client.post("/api/token", json={"name": "olga", "password": PASSWORD}).json()
    auth = {"authorization": f"Bearer {token['token']}"}
    body = (
        '{"machine": "outcome", "key": "api-1", "version": 2, "trigger": "decide_landed", '
        '"actor": "operator", "reason": "r", "result": {"amount": 1.0000000000000000000001}}'
    )
    answer = client.post("/api/act", content=body, headers=auth)
    assert answer.status_code == 400, answer.text
    assert "would be kept as 1.0" in answer.json()["error"]
    assert state_of(store, "api-1") == "indeterminate"
    kept = body.replace("1.0000000000000000000001", "1.25")
    assert client.post("/api/act", content=kept, headers=auth).status_code == 200
    with store.transaction() as tx:
        row = tx.get("outcome", "api-1")
    assert row is not None and row.data["result"] == {"amount": 1.25}

"""The desk's sign-in page says only its own words (issue 27, outsider batch 19, b09): it
showed any text given in ``/login?said=``, so a link could make the desk's own page say
"your account is locked, call +1-555-0100". The URL now carries a code of a fixed
message; any other text shows nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from machines.desk.accounts import add_account, read_accounts
from machines.desk.app import desk_app
from machines.spec.loader import load
from machines.store import open_store
from tests.conftest import store_url

PASSWORD = "correct horse battery staple"
SPOOF = "Session expired. Call the help desk at +1-555-0100 and give your password"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    accounts = tmp_path / "accounts.json"
    add_account(accounts, "olga", ["operator"], PASSWORD)
    with open_store(store_url("sqlite", tmp_path), [load("outcome")]) as store:
        app = desk_app(store, read_accounts(accounts))
        yield TestClient(app, base_url="http://desk.test", follow_redirects=True)


def _message(html: str) -> str | None:
    found = re.search(r'id="message">([^<]*)<', html)
    return None if found is None else found.group(1)


def test_the_sign_in_page_shows_no_text_from_the_url(client: TestClient) -> None:
    page = client.get("/login", params={"said": SPOOF})
    assert page.status_code == 200
    assert "555-0100" not in page.text and _message(page.text) is None
    assert _message(client.get("/login", params={"said": "signed out"}).text) is None


def test_signing_out_is_said_by_its_code(client: TestClient) -> None:
    signed_in = client.post("/login", data={"name": "olga", "password": PASSWORD})
    csrf = re.search(r'name="csrf" value="([^"]+)"', signed_in.text)
    assert csrf is not None, signed_in.text
    page = client.post("/logout", data={"csrf": csrf.group(1)})
    assert page.url.path == "/login" and page.url.query == b"said=signed-out"
    assert _message(page.text) == "signed out"

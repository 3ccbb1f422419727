"""The desk in a real headless Chromium (issue 30), served by uvicorn as ``machines desk``
serves it, over SQLite and PostgreSQL: a person signs in, sees a parked charge and a
pending approval, decides one and sees the history and the picture change; two browsers
race on one entity and one wins; a form another site posts is refused; a person without
the role is offered nothing and refused; a session ends when unused. Skipped (one summary
line) without Chromium or chromedriver locally; in CI ``.ci/run`` installs both."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from machines.desk.accounts import add_account, read_accounts
from machines.desk.app import desk_app
from machines.desk.sessions import Sessions
from machines.store import Store, open_store
from tests.conftest import postgres_schema
from tests.test_site import chromium

PASSWORD = "correct horse battery"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def serve(app: Any) -> tuple[str, Any]:
    """``app`` served by uvicorn on a free port of 127.0.0.1, in a thread; its URL and the
    server (set ``should_exit`` to stop it)."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


class Desk:
    def __init__(self, tmp: Path, url: str) -> None:
        self.store: Store = open_store(url)
        accounts = tmp / "accounts.json"
        add_account(accounts, "olga", ["operator", "human"], PASSWORD)
        add_account(accounts, "carl", ["caller"], PASSWORD)
        self.clock = Clock()
        sessions = Sessions(seconds=600, clock=self.clock)
        self.url, self.server = serve(
            desk_app(self.store, read_accounts(accounts), sessions=sessions)
        )
        self.tmp = tmp
        self.browsers: list[Any] = []

    def browser(self, name: str = "olga") -> Any:
        from selenium.webdriver.common.by import By

        driver = chromium(self.tmp / f"chromium-{len(self.browsers)}", "1300,1400")
        self.browsers.append(driver)
        driver.get(f"{self.url}/login")
        driver.find_element(By.ID, "name").send_keys(name)
        driver.find_element(By.ID, "password").send_keys(PASSWORD)
        loaded(driver, driver.find_element(By.ID, "sign-in").click)
        assert driver.find_element(By.ID, "person").text == name
        return driver

    def close(self) -> None:
        for driver in self.browsers:
            driver.quit()
        self.server.should_exit = True
        self.store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def desk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Desk]:
    with ExitStack() as stack:
        url = (
            stack.enter_context(postgres_schema())
            if request.param == "postgres"
            else f"sqlite:///{tmp_path / 'desk.db'}"
        )
        found = Desk(tmp_path, url)
        stack.callback(found.close)
        yield found


def parked(store: Store, key: str) -> None:
    row = store.insert("outcome", key)[0]
    store.move(row, "park", actor="worker", detail={"evidence": "lease expired"})


def loaded(driver: Any, navigate: Callable[[], object]) -> None:
    """``navigate()`` (a click that submits or follows a link), then wait until the next
    page has loaded: a click returns before the browser leaves the page, and on a busy
    machine the old page would still be read."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    navigate()
    wait = WebDriverWait(driver, 30)
    wait.until(lambda d: _gone(page))
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")


def _gone(element: Any) -> bool:
    """Whether ``element``'s page has been left. Chromium says so with a stale reference,
    or, caught in the middle of the navigation, with "Node with given id does not belong
    to the document" (a plain WebDriverException, which ``staleness_of`` lets through)."""
    from selenium.common.exceptions import WebDriverException

    try:
        element.is_enabled()
    except WebDriverException:
        return True
    return False


def page_text(driver: Any) -> str:
    """The page's text now, or "" while the browser is between pages."""
    from selenium.common.exceptions import WebDriverException

    try:
        return str(driver.execute_script("return document.body ? document.body.innerText : ''"))
    except WebDriverException:
        return ""


def act(driver: Any, trigger: str, reason: str) -> None:
    from selenium.webdriver.common.by import By

    button = driver.find_element(By.CSS_SELECTOR, f'button[data-trigger="{trigger}"]')
    form = button.find_element(By.XPATH, "./ancestor::form")
    form.find_element(By.NAME, "reason").send_keys(reason)
    loaded(driver, button.click)


def test_a_person_signs_in_sees_what_waits_and_decides_one(desk: Desk) -> None:
    from selenium.webdriver.common.by import By

    parked(desk.store, "charge-1")
    desk.store.insert("effect", "rm -rf /data", context={"tier": "irreversible"})
    olga = desk.browser()
    listed = olga.find_element(By.ID, "waiting").text
    assert "charge-1" in listed and "rm -rf /data" in listed
    loaded(olga, olga.find_element(By.LINK_TEXT, "charge-1").click)
    before = olga.find_element(By.ID, "picture").get_attribute("src")
    act(olga, "decide_landed", "the bank statement shows it <b>landed</b>")
    assert olga.find_element(By.ID, "state").text == "succeeded"
    history = olga.find_element(By.ID, "history").text
    assert "decide_landed" in history and "olga" in history
    assert "<b>landed</b>" in history  # shown as text, not markup
    after = olga.find_element(By.ID, "picture").get_attribute("src")
    assert after != before  # the picture now shows succeeded and the way there
    olga.get(desk.url)
    loaded(olga, olga.find_element(By.LINK_TEXT, "rm -rf /data").click)
    act(olga, "approve", "reviewed the command with the team")
    assert olga.find_element(By.ID, "state").text == "approved"


def test_two_browsers_racing_on_one_entity_get_one_winner(desk: Desk) -> None:
    from selenium.webdriver.common.by import By

    parked(desk.store, "charge-2")
    first, second = desk.browser(), desk.browser()
    for driver in (first, second):
        driver.get(f"{desk.url}/entity/outcome/charge-2")
    act(first, "decide_landed", "first")
    act(second, "decide_not_landed", "second")
    assert first.find_element(By.ID, "state").text == "succeeded"
    message = second.find_element(By.ID, "message").text
    assert "changed since the page was shown" in message and "now succeeded" in message
    assert second.find_element(By.ID, "state").text == "succeeded"


def test_a_form_another_site_posts_is_refused(desk: Desk) -> None:
    from selenium.webdriver.common.by import By

    parked(desk.store, "charge-3")
    target = f"{desk.url}/entity/outcome/charge-3/act"

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = (
                f'<form id="f" method="post" action="{target}">'
                '<input name="version" value="2"><input name="trigger" value="decide_landed">'
                '<input name="actor" value="operator"><input name="reason" value="x">'
                '<input name="csrf" value="guessed"></form>'
                "<script>document.getElementById('f').submit()</script>"
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        olga = desk.browser()
        olga.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        refusal = "not sent from the desk's own page"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            desk.url in olga.current_url and refusal in page_text(olga)
        ):
            time.sleep(0.05)
        assert refusal in olga.find_element(By.TAG_NAME, "body").text
    finally:
        evil.shutdown()
    with desk.store.transaction() as tx:
        row = tx.get("outcome", "charge-3")
    assert row is not None and row.state == "indeterminate"


def test_a_person_without_the_role_is_offered_nothing_and_refused(desk: Desk) -> None:
    from selenium.webdriver.common.by import By

    parked(desk.store, "charge-4")
    carl = desk.browser("carl")  # a caller: may reclaim, may not decide
    carl.get(f"{desk.url}/entity/outcome/charge-4")
    offered = [
        b.get_attribute("data-trigger") for b in carl.find_elements(By.CSS_SELECTOR, "button.do")
    ]
    assert offered == ["reclaim"]
    forge = (  # a forged decide, from the desk's own page and session
        "const f = document.querySelector('form.move');"
        "f.querySelector('[name=trigger]').value = 'decide_landed';"
        "f.querySelector('[name=actor]').value = 'operator';"
        "f.querySelector('[name=reason]').value = 'forged';"
        "f.submit();"
    )
    loaded(carl, lambda: carl.execute_script(forge))
    assert "you may not decide_landed" in carl.find_element(By.ID, "message").text
    assert carl.find_element(By.ID, "state").text == "indeterminate"


def test_a_session_ends_when_unused(desk: Desk) -> None:
    from selenium.webdriver.common.by import By

    olga = desk.browser()
    desk.clock.now += 601
    olga.get(desk.url)
    deadline = time.monotonic() + 30  # a busy machine may still be showing the old page
    while not olga.find_elements(By.ID, "sign-in") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert olga.find_elements(By.ID, "sign-in") and not olga.find_elements(By.ID, "person")

"""``machines desk`` and ``machines desk add-account`` from the command line (issue 30):
a password read from standard input and kept only as a hash; a desk that refuses to start
without accounts, with a role no definition has as a person, or with a store it cannot
open, always with exit 2 and one line; and one that starts binds to 127.0.0.1:8750 unless
told otherwise, and closes its store when stopped."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

import machines
from machines.cli import main
from machines.desk import serving
from machines.store import StaleWrite, open_store

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct horse battery"


def made(url: str) -> str:
    """``url`` with a store made there (the desk opens only an existing one)."""
    open_store(url).close()
    return url


def add(
    monkeypatch: pytest.MonkeyPatch, accounts: Path, name: str, roles: str, password: str
) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    return main(["desk", "add-account", name, "--roles", roles, "--accounts", str(accounts)])


def test_add_account_reads_the_password_from_standard_input_and_keeps_its_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator,human", PASSWORD) == 0
    out = capsys.readouterr().out
    assert "olga may act as human, operator" in out or "olga may act as operator, human" in out
    text = accounts.read_text()
    assert PASSWORD not in text and PASSWORD not in out
    assert sorted(json.loads(text)["accounts"]["olga"]["roles"]) == ["human", "operator"]
    before = accounts.read_bytes()
    assert add(monkeypatch, accounts, "ivan", "operator", "short") == 2
    err = capsys.readouterr().err
    assert err.startswith("machines desk: ") and err.count("\n") == 1 and "short" not in err
    assert accounts.read_bytes() == before  # nothing written
    # outsider batch 41 (c 33): bytes that are not UTF-8 on standard input were a traceback
    not_text = b"\xff\xfe password long enough".decode("utf-8", "surrogateescape")
    assert add(monkeypatch, accounts, "ivan", "operator", not_text) == 2
    assert "the password is not text" in capsys.readouterr().err
    assert accounts.read_bytes() == before


@pytest.mark.parametrize(
    "argv",
    [
        ["desk", "add-account", "olga"],  # no --roles
        ["desk", "add-account", "--roles", "operator"],  # no name
        ["desk", "sqlite:///x.db", "olga"],  # a name without add-account
    ],
)
def test_add_account_needs_a_name_and_roles_and_only_it_takes_them(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--accounts", str(tmp_path / "a.json")])
    assert stop.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_the_desk_refuses_to_start_without_accounts_or_with_a_role_nobody_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[Any] = []
    monkeypatch.setattr(serving, "serve", lambda *a, **k: served.append(a))
    store = made(f"sqlite:///{tmp_path / 'store.db'}")
    missing = tmp_path / "none.json"
    assert main(["desk", store, "--accounts", str(missing)]) == 2
    assert "none.json" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": 1, "accounts": {}}))
    assert main(["desk", store, "--accounts", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    janitor = tmp_path / "janitor.json"
    assert add(monkeypatch, janitor, "jim", "janitor", PASSWORD) == 2  # batch 38: refused
    from machines.desk.accounts import add_account

    add_account(janitor, "jim", ["janitor"], PASSWORD)  # written by hand, then
    assert main(["desk", store, "--accounts", str(janitor)]) == 2
    err = capsys.readouterr().err
    assert "janitor" in err and "the people are:" in err and "operator" in err
    assert served == []


def test_a_desk_that_starts_binds_to_localhost_and_closes_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[tuple[Any, str, int]] = []
    monkeypatch.setattr(
        serving, "serve", lambda app, host, port, **options: served.append((app, host, port))
    )
    closed: list[bool] = []
    desk_made = serving.desk_for

    def desk_for(*args: Any) -> Any:
        app, store = desk_made(*args)
        close = store.close

        def closing() -> None:
            closed.append(True)
            close()

        monkeypatch.setattr(store, "close", closing)
        return app, store

    monkeypatch.setattr(serving, "desk_for", desk_for)
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    store = made(f"sqlite:///{tmp_path / 'store.db'}")
    assert main(["desk", store, "--accounts", str(accounts)]) == 0
    ((_, host, port),) = served
    assert (host, port) == ("127.0.0.1", 8750)
    err = capsys.readouterr().err
    assert "serving" in err and PASSWORD not in err
    assert main(["desk", store, "--accounts", str(accounts), "--port", "9001"]) == 0
    assert served[-1][2] == 9001
    assert closed == [True, True]  # each store closed when its desk stopped


def test_a_store_the_desk_cannot_open_is_exit_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    capsys.readouterr()
    for url in (f"sqlite:///{tmp_path}", "nosuch://x", "postgresql://nobody@127.0.0.1:1/x"):
        assert main(["desk", url, "--accounts", str(accounts)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("machines desk: ") and "Traceback" not in err, err


def test_an_accounts_file_that_is_a_fifo_or_a_device_is_refused_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    fifo = tmp_path / "accounts.fifo"
    os.mkfifo(fifo)
    for accounts in (fifo, Path("/dev/zero")):
        assert main(["desk", f"sqlite:///{tmp_path / 's.db'}", "--accounts", str(accounts)]) == 2
        assert "not a regular file" in capsys.readouterr().err
    assert add(monkeypatch, fifo, "olga", "operator", PASSWORD) == 2


def test_the_desk_trusts_no_proxy_header_and_logs_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options))
    serving.serve(None, "127.0.0.1", 8750)  # type: ignore[arg-type]
    assert seen["proxy_headers"] is False and seen["forwarded_allow_ips"] == ""


def test_a_desk_that_cannot_serve_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (b07): a port in use ended the desk with uvicorn's exit 3; the
    command promises 2 when it cannot start."""
    import socket

    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        url = made(f"sqlite:///{tmp_path}/store.db")
        code = main(["desk", url, "--accounts", str(accounts), "--port", str(port)])
    assert code == 2
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_store_that_is_a_fifo_is_refused_not_waited_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (b07): ``machines pending sqlite:///fifo`` (and the audit) waited
    for ever for a writer."""
    import os

    os.mkfifo(tmp_path / "fifo")
    store = tmp_path / "store.db"  # batch 18: a FIFO beside a real store, as its journal
    open_store(f"sqlite:///{store}").close()
    os.mkfifo(tmp_path / "store.db-journal")
    assert main(["pending", f"sqlite:///{store}"]) == 2
    assert "store.db-journal is not a file" in capsys.readouterr().err
    for argv in (
        ["pending", f"sqlite:///{tmp_path}/fifo"],
        ["audit", "--from-store", f"sqlite:///{tmp_path}/fifo"],
    ):
        assert main(argv) == 2
        assert "is not a file" in capsys.readouterr().err


def test_behind_the_named_proxy_the_desk_is_https(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 17 (b20): behind a TLS proxy, as the guide says to run it, a sign-in
    from the page was refused (the desk saw http, the browser's Origin said https) and the
    cookie was not Secure. ``--proxy ADDRESS`` trusts that proxy's forwarded headers, as
    uvicorn applies them, and no one else's."""
    import uvicorn
    from starlette.testclient import TestClient
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options))
    serving.serve(None, "127.0.0.1", 8750, proxy="10.0.0.7")  # type: ignore[arg-type]
    assert seen["proxy_headers"] is True and seen["forwarded_allow_ips"] == "10.0.0.7"
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    app, store = serving.desk_for(made(f"sqlite:///{tmp_path}/s.db"), accounts, None, 30)
    try:
        forwarded = {"x-forwarded-proto": "https", "origin": "https://desk.example.com"}
        for trusted, ok in (("testclient", True), ("10.0.0.7", False)):
            client = TestClient(
                ProxyHeadersMiddleware(app, trusted_hosts=trusted),  # type: ignore[arg-type]
                base_url="http://desk.example.com",
                follow_redirects=False,
            )
            answer = client.post(
                "/login", data={"name": "olga", "password": PASSWORD}, headers=forwarded
            )
            assert (answer.status_code == 303) is ok, answer.status_code
            if ok:
                assert "secure" in answer.headers["set-cookie"].lower()
    finally:
        store.close()


def test_the_desk_answers_only_for_its_own_host_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 27 (b 2): the desk never looked at the Host header, and its sign-in
    check compared Origin with that same header: a page whose name was pointed at
    127.0.0.1 (DNS rebinding) counted as the desk's own page, guessed passwords against a
    loopback desk and locked a person out. It answers for localhost, the address it
    listens on and the names given with --hostname only."""
    import uvicorn
    from starlette.testclient import TestClient

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.update(app=app))
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    app, store = serving.desk_for(made(f"sqlite:///{tmp_path}/s.db"), accounts, None, 30)
    try:
        serving.serve(app, "127.0.0.1", 8750, names=["desk.example.com"])
        for host, ok in (
            ("127.0.0.1:8750", True),
            ("localhost:8750", True),
            ("desk.example.com", True),
            ("rebound.attacker.example:8750", False),
        ):
            client = TestClient(served["app"], base_url=f"http://{host}")
            origin = {"origin": f"http://{host}"}
            answer = client.post(
                "/login", data={"name": "olga", "password": "wrong"}, headers=origin
            )
            assert (answer.status_code == 400) is not ok, (host, answer.status_code)
    finally:
        store.close()
    assert serving.answered_hosts("0.0.0.0") == ["localhost", "127.0.0.1", "[::1]"]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("*", "a * would answer any host"),
        ("*example.com", "a * would answer any host"),
        ("desk.example.com:8443", "a port is not part of it"),
        ("desk_example.com", "it is no DNS name"),
        ("", "it is no DNS name"),
        ("desk.example.com.", "without the final dot"),  # batch 32 (b 2): matched nothing
        ("127.1", "nor an address written in full"),
        ("123", "nor an address written in full"),
        ("fe80::1%eth0", "with its %zone"),
    ],
)
def test_a_hostname_that_names_no_host_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, says: str
) -> None:
    """Outsider batch 30 (b 1): --hostname '*' turned the Host check off (Starlette reads
    it as any host), '*example.com' crashed the desk with a traceback after it said it was
    serving, and a name with its port matched nothing. Each is refused before anything
    starts, exit 2, naming the value."""
    accounts = tmp_path / "accounts.json"
    with pytest.raises(SystemExit) as stopped:
        main(["desk", "sqlite:///x.db", "--accounts", str(accounts), "--hostname", given])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--hostname takes a host name" in err and says in err, err


def test_a_desk_on_an_ipv6_address_answers_for_it() -> None:
    """Outsider batch 30 (b 2): --host ::1 was answered for as '::1', but a browser sends
    '[::1]:port', and every request was refused; the URL printed was no URL."""
    assert serving.answered_hosts("::1") == ["localhost", "127.0.0.1", "[::1]"]
    assert "[2001:db8::7]" in serving.answered_hosts("2001:db8::7")
    assert serving.url_host("::1") == "[::1]" and serving.url_host("127.0.0.1") == "127.0.0.1"
    assert serving.host_name("Desk.Example.COM") == "desk.example.com"
    assert serving.host_name("[2001:DB8::1]") == "[2001:db8::1]"


def test_pending_says_the_days_of_a_long_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 18: a wait of two days and three hours was printed as 03:00:05."""
    import sqlite3
    import time

    url = f"sqlite:///{tmp_path}/store.db"
    with open_store(url) as store:
        row = store.insert("outcome", "old")[0]
        store.move(row, "park", actor="worker", detail={"evidence": "lease expired"})
    ago = time.time() - (2 * 86400 + 3 * 3600 + 5)
    with sqlite3.connect(tmp_path / "store.db") as raw:
        raw.execute(
            "UPDATE outcome_entities SET updated_at = ?, version = version + 1 WHERE key = 'old'",
            (ago,),
        )
    assert main(["pending", url]) == 0
    assert "old in indeterminate for 2d 03:00:0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "proxy",
    [
        "*",
        "proxy.internal",
        "10.0.0.7, *",
        " ",
        "10.0.0.300",
        "0.0.0.0/0",
        "::/0",
        "10.0.0.7,::/0",
        "0.0.0.0/1,128.0.0.0/1",
        "::/1,8000::/1",
        "::ffff:0:0/96",
        "9.0.0.0/7",
        ",".join(f"{n}.0.0.0/8" for n in range(1, 256, 2)),  # batch 26: half of IPv4
        "10.0.0.0/8,12.0.0.0/8",
        "127.0.0.1/8",  # batch 26: host bits set, which uvicorn matches to no one
        "10.0.0.7/24",
    ],
)
def test_a_proxy_is_named_by_its_address_only(
    proxy: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Outsider batch 18 (b20): ``--proxy`` took any text, ``*`` included, which makes the
    desk trust anyone's X-Forwarded-For and X-Forwarded-Proto. It takes IP addresses and
    networks only; a name, ``*`` or a network of every address (batch 20, b11:
    ``0.0.0.0/0``) is a usage error, and nothing is served."""
    served: list[Any] = []
    monkeypatch.setattr(serving, "serve", lambda *a, **k: served.append(a))
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    store = made(f"sqlite:///{tmp_path / 'desk.db'}")
    with pytest.raises(SystemExit) as exited:
        main(["desk", store, "--accounts", str(accounts), "--proxy", proxy])
    assert exited.value.code == 2 and served == []
    assert "--proxy takes the proxy's IP address or network" in capsys.readouterr().err
    assert (
        main(["desk", store, "--accounts", str(accounts), "--proxy", "10.0.0.7, 10.1.0.0/16"]) == 0
    )
    assert len(served) == 1


def test_pending_runs_without_the_desks_web_server(tmp_path: Path) -> None:
    """Outsider batch 38 (c C2): ``machines pending`` imported the desk's web app, so
    without the ``desk`` extra (Starlette) it ended in a raw ``ModuleNotFoundError`` on every
    store, and ``--format json`` printed no JSON. It needs no web server."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/store.db"
    with open_store(url) as store:
        row = store.insert("outcome", "k")[0]
        store.move(row, "park", actor="worker", detail={"evidence": "lease expired"})
    blocked = (
        "import sys; sys.modules.update(starlette=None, uvicorn=None, itsdangerous=None); "
        "from machines.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", blocked, "pending", url, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert [p["key"] for p in json.loads(ran.stdout)["pending"]] == ["k"]


@pytest.mark.parametrize("roles", ["worker", "nosuch", "operator,proxy", ",", " , ,"])
def test_add_account_refuses_a_role_that_is_no_person(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], roles: str
) -> None:
    """Outsider batch 38 (c K3): add-account wrote an account acting as an automatic actor
    (or one no definition has); the desk then refused to start on the file, and a running
    desk let the account sign in. add-account refuses it, naming the people, and writes
    nothing."""
    accounts = tmp_path / "accounts.json"
    if roles.strip(" ,"):
        assert add(monkeypatch, accounts, "bob", roles, PASSWORD) == 2
        err = capsys.readouterr().err
        assert "are no person of these definitions; the people are:" in err and "operator" in err
    else:  # batch 39 (c B3): no role at all was written, and locked every account out
        with pytest.raises(SystemExit) as usage:
            add(monkeypatch, accounts, "bob", roles, PASSWORD)
        assert usage.value.code == 2 and "--roles ROLE" in capsys.readouterr().err
    assert not accounts.exists()


def test_the_desk_makes_no_store_where_there_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 41 (c 32): ``machines desk sqlite:///typo.db`` made an empty database
    and served it, with nothing waiting, though its help says a store that cannot be
    opened is exit 2. The desk opens only an existing store (``create=False``): a missing
    file, or one with no store in it, is exit 2 and nothing is written."""
    served: list[Any] = []
    monkeypatch.setattr(serving, "serve", lambda *a, **k: served.append(a))
    accounts = tmp_path / "accounts.json"
    assert add(monkeypatch, accounts, "olga", "operator", PASSWORD) == 0
    capsys.readouterr()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path in (tmp_path / "typo.db", empty):
        assert main(["desk", f"sqlite:///{path}", "--accounts", str(accounts)]) == 2
        assert "no store is there" in capsys.readouterr().err
    assert served == [] and sorted(p.name for p in tmp_path.iterdir()) == [
        "accounts.json",
        "empty.db",
    ]
    assert empty.read_bytes() == b""
    # batch 42 (c 4b, 4c): a store of other definitions gained their tables
    import sqlite3

    import machines

    other = tmp_path / "outcome.db"
    open_store(f"sqlite:///{other}", [machines.load("outcome")]).close()
    before = other.read_bytes()
    assert main(["desk", f"sqlite:///{other}", "--accounts", str(accounts)]) == 2
    assert "the store has no tables for 'effect', 'node', 'request'" in capsys.readouterr().err
    with sqlite3.connect(other) as raw:
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    assert not any(n.startswith(("effect_", "node_", "request_")) for n in names), names
    assert served == [] and other.read_bytes() == before


def test_a_desk_stopped_by_sigterm_exits_0(tmp_path: Path) -> None:
    """Outsider batch 41 (c 35): the help says exit 0 when stopped; SIGTERM (what systemd
    and a CI timeout send) ended the desk with 143 after uvicorn's graceful shutdown."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    accounts = tmp_path / "accounts.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    machines = [sys.executable, "-m", "machines", "desk"]
    adding = ["add-account", "olga", "--roles", "operator", "--accounts", str(accounts)]
    subprocess.run(
        [*machines, *adding],
        input=PASSWORD + "\n", text=True, check=True, env=env, capture_output=True,
    )  # fmt: skip
    url = made(f"sqlite:///{tmp_path / 'store.db'}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    desk = subprocess.Popen(
        [*machines, url, "--accounts", str(accounts), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        desk.send_signal(signal.SIGTERM)
        assert desk.wait(timeout=60) == 0, desk.stdout.read() if desk.stdout else ""
    finally:
        if desk.poll() is None:
            desk.kill()


def test_the_guides_own_machine_in_a_store_is_listed_for_its_people(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 43 (b 33): no page showed how a user's own machine's entities get
    into a store the desk reads. desk.md's ``record.py`` runs as the page shows it, and
    what it records is listed as waiting on a person."""
    import re
    import shutil
    import subprocess
    import sys

    page = (ROOT / "docs" / "guide" / "desk.md").read_text(encoding="utf-8")
    (code,) = re.findall(r'```python title="record.py"\n(.*?)```', page, re.DOTALL)
    (tmp_path / "specs").mkdir()
    shutil.copy(ROOT / "tests" / "user_project" / "specs" / "refund.yaml", tmp_path / "specs")
    (tmp_path / "record.py").write_text(code, encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "record.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0 and ran.stdout.split()[0] == "awaiting_approval", ran
    monkeypatch.chdir(tmp_path)
    assert main(["pending", "sqlite:///refunds.db", "--spec-dir", "specs"]) == 0
    assert "refund r-1001 in awaiting_approval" in capsys.readouterr().out
    store = open_store("sqlite:///refunds.db", [machines.load("specs/refund.yaml")])
    try:
        with store.transaction() as tx:
            row = tx.get("refund", "r-1001")
        assert row is not None
        store.move(row, "approve", actor="approver")
        with pytest.raises(StaleWrite):  # the row as last read moved since, as the page says
            store.move(row, "reject", actor="approver")
    finally:
        store.close()

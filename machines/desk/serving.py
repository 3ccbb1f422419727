"""Starting the desk: the store opened for the project's definitions, the accounts checked
against them, and the application served with uvicorn."""

from __future__ import annotations

import ipaddress
import re
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from machines.desk.accounts import AccountsError, people, read_accounts, require_people
from machines.desk.sessions import Sessions
from machines.desk.waiting import DeskError
from machines.errors import install_command
from machines.spec.loader import definition_paths, read_definition
from machines.spec.project import definitions_dir
from machines.store import open_store
from machines.store.records import OpenedStore

if TYPE_CHECKING:
    from starlette.applications import Starlette


def opened(url: str, spec_dir: Path | None, *, read_only: bool = False) -> OpenedStore:
    """The store at ``url``, for the definitions ``definitions_dir(spec_dir)`` chooses: an
    existing one (``create=False``): people act on what waits in a store their services
    made, and a mistyped URL must not serve a new, empty one with nothing waiting."""
    paths = definition_paths(definitions_dir(spec_dir).spec_dir)
    specs = [read_definition(p) for p in paths]
    return open_store(url, specs, read_only=read_only, create=False)


def desk_for(
    url: str, accounts_file: Path, spec_dir: Path | None, session_minutes: int
) -> tuple[Starlette, OpenedStore]:
    """The desk application over the store at ``url``, and the store; ``AccountsError``
    when there are no accounts, or one has a role no definition's person has."""
    try:
        from machines.desk.app import desk_app
    except ImportError:
        raise AccountsError(f"the desk needs its libraries: {install_command('desk')}") from None
    accounts = read_accounts(accounts_file)
    if not accounts.by_name:
        raise AccountsError(f"{accounts_file}: no accounts; add one with add-account")
    store = opened(url, spec_dir)
    try:
        require_people(accounts.roles(), people(store.specs().values()), str(accounts_file))
    except AccountsError:
        store.close()
        raise
    app = desk_app(store, accounts, sessions=Sessions(seconds=session_minutes * 60.0))
    return app, store


LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""The names the desk always answers to: its own machine's."""

_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)\Z")


def host_name(text: str) -> str:
    """``text`` as a ``Host`` header names a host (lower case, an IPv6 address in
    brackets), or ``ValueError`` saying why it is none: a ``*`` (which would answer any
    host: DNS rebinding), a port, or anything but a DNS name or an IP address (outsider
    batch 30: ``*`` turned the check off, ``*x.com`` crashed the desk, ``name:8443``
    matched nothing)."""
    name = text.strip().lower()
    inner = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        address = ipaddress.ip_address(inner)
    except ValueError:
        address = None
    if address is not None:
        if getattr(address, "scope_id", None):
            raise ValueError("a browser does not send an address with its %zone")
        return f"[{address.compressed}]" if address.version == 6 else address.compressed
    labels = name.split(".")
    if "*" in name:
        raise ValueError("a * would answer any host")
    if ":" in name:
        raise ValueError("a port is not part of it")
    if name.endswith("."):
        raise ValueError("write it without the final dot, as browsers send it")
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError("it is no DNS name")
    if labels[-1].isdigit():
        raise ValueError("it is no DNS name, nor an address written in full (127.0.0.1)")
    return name


def url_host(host: str) -> str:
    """``host`` (an address to listen on) as a URL names it: an IPv6 address in brackets."""
    try:
        return host_name(host)
    except ValueError:
        return host


def answered_hosts(host: str, names: Sequence[str] = ()) -> list[str]:
    """The host names a request may name (its ``Host`` header) for the desk to answer it:
    the machine's own, the address it listens on, and ``names`` (what a proxy forwards).
    Any other is refused: a page whose name was pointed at this machine (DNS rebinding)
    would otherwise be the desk's own page to the desk (outsider batch 27)."""
    wildcard = host in ("0.0.0.0", "::", "")
    return list(dict.fromkeys([*LOCAL_NAMES, *([] if wildcard else [url_host(host)]), *names]))


def serve(
    app: Starlette,
    host: str,
    port: int,
    *,
    proxy: str | None = None,
    names: Sequence[str] = (),
) -> None:
    """Serve ``app`` until interrupted (uvicorn; no server header, no access log of
    bodies: it logs the request line and status only). Proxy headers are trusted only
    from ``proxy`` (the TLS proxy's address): from anyone else uvicorn would take
    ``X-Forwarded-For`` as the address, and every failed sign-in would count against an
    address of the client's choosing. From the proxy, ``X-Forwarded-Proto`` makes the
    page's origin https (a browser's sign-in is then from the desk's own page) and the
    cookie ``Secure``."""
    import uvicorn
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stopped) if main_thread else None
    try:
        uvicorn.run(
            TrustedHostMiddleware(app, allowed_hosts=answered_hosts(host, names)),
            host=host,
            port=port,
            server_header=False,
            proxy_headers=proxy is not None,
            forwarded_allow_ips=proxy or "",
            log_level="info",
        )
    except _Stopped:
        pass  # uvicorn shut down on SIGTERM (what systemd and a CI timeout send) and re-sent it
    except SystemExit as stopped:  # uvicorn exits 3 when it cannot start (a port in use)
        if stopped.code not in (None, 0):
            raise DeskError(
                f"cannot serve on {host}:{port} (the reason is logged above: a port in use, "
                "an address this machine does not have); choose another --host or --port"
            ) from None
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class _Stopped(Exception):
    """SIGTERM reached the desk: uvicorn shut down gracefully and sent it again."""


def _stopped(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as a stop, not a death: the desk exits 0 when stopped, as its help says,
    however it was stopped (outsider batch 41, c 35: SIGTERM ended it with 143)."""
    raise _Stopped

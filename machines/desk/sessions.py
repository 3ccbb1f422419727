"""Who is signed in to the desk, kept on the server: sessions, their CSRF tokens, API
tokens and the limit on failed sign-ins.

A session is a random 256-bit id in an ``HttpOnly``, ``SameSite=Strict`` cookie that names
nothing else; the server keeps what it means (the account, the session's CSRF token, when
it ends), so signing out or the session's end makes the cookie worthless at once, and a
desk restarted forgets every session. Every state-changing form carries the CSRF token,
compared in constant time. An API token is the same kind of id, for a script, sent as
``Authorization: Bearer``. Failed sign-ins are counted per client address and per account
name; past ``FAILURES`` within ``WINDOW`` seconds, sign-in is refused until the window
passes.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from machines.desk.accounts import Account

SESSION_SECONDS = 30 * 60
"""How long a session (or an API token) lasts after its last use, by default."""
FAILURES = 5
WINDOW = 300.0

SIGNED_OUT = "signed-out"
SAID = {SIGNED_OUT: "signed out"}
"""What the sign-in page says after a redirect (``/login?said=CODE``), by code: the page
shows only these fixed texts, so a link cannot make the desk's own page say what its
sender likes ("your account is locked, call ..."); an unknown code shows nothing."""


@dataclass
class Session:
    account: Account
    csrf: str
    ends: float


@dataclass
class Sessions:
    """The signed-in sessions and API tokens, and the failed sign-ins, of one desk."""

    seconds: float = SESSION_SECONDS
    clock: Callable[[], float] = time.monotonic
    _by_id: dict[str, Session] = field(default_factory=dict)
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, account: Account) -> str:
        """A new session (or API token) for ``account``: its id."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._forget_ended()
            self._by_id[sid] = Session(
                account, secrets.token_urlsafe(32), self.clock() + self.seconds
            )
        return sid

    def get(self, sid: str | None) -> Session | None:
        """The live session of ``sid``, its end moved on by this use; None when there is
        none, or it has ended."""
        if not sid:
            return None
        now = self.clock()
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if session.ends <= now:
                del self._by_id[sid]
                return None
            session.ends = now + self.seconds
            return session

    def end(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)

    def end_with_token(self, csrf: object) -> None:
        """End the session whose form token is ``csrf``: a page's "Sign out" ends the
        session that page was shown in, even when the browser's cookie is another's now
        (a second sign-in in another tab)."""
        if not isinstance(csrf, str) or not csrf:
            return
        with self._lock:
            for sid in [s for s, found in self._by_id.items() if same_token(csrf, found.csrf)]:
                del self._by_id[sid]

    def _forget_ended(self) -> None:
        now = self.clock()
        for sid in [s for s, session in self._by_id.items() if session.ends <= now]:
            del self._by_id[sid]

    def refused(self, *who: str) -> bool:
        """Whether sign-in is refused for now to any of ``who`` (an address, a name)."""
        now = self.clock()
        with self._lock:
            for key in who:
                recent = self._failures.get(key)
                while recent and recent[0] <= now - WINDOW:
                    recent.popleft()
                if recent is not None and len(recent) >= FAILURES:
                    return True
        return False

    def failed(self, *who: str) -> None:
        now = self.clock()
        with self._lock:
            for key in who:
                self._failures.setdefault(key, deque(maxlen=FAILURES)).append(now)


def same_token(given: object, expected: str) -> bool:
    """Whether a form's CSRF token is the session's, compared in constant time."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())

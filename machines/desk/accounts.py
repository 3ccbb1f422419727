"""Who may sign in to the desk, and as which of the definitions' people.

The accounts are the owner's: one JSON file (``machines desk add-account``), each account a
name, its roles and an Argon2id hash of its password (``argon2-cffi``, the reference
implementation's binding); no password is kept, shown or logged. A role is the name of an
actor that a definition says is not automatic (``operator``, ``human``): a person acts only
as the actors their roles name, and the store records the move under that actor with the
person's name in its detail.

A file that cannot be read, is not this format, or holds an account that breaks a rule is
``AccountsError``, naming the file and what to fix: the desk never starts on half of it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from machines.errors import MachinesError, install_command
from machines.spec import MachineSpec
from machines.spec.files import os_reason
from machines.spec.jsonvalue import encodable

FORMAT = "machines-desk-accounts/1"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
"""An account's name: what the history records as the person who acted."""
ROLE = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""A role: the name of a non-automatic actor of a definition."""
MIN_PASSWORD = 12
MAX_PASSWORD = 1024


class AccountsError(MachinesError):
    """The accounts file, or an account to add, is not what the desk can use."""


@dataclass(frozen=True)
class Account:
    name: str
    roles: tuple[str, ...]
    password_hash: str


@dataclass(frozen=True)
class Accounts:
    path: Path
    by_name: Mapping[str, Account]

    def roles(self) -> frozenset[str]:
        return frozenset(role for account in self.by_name.values() for role in account.roles)


def people(specs: Iterable[MachineSpec]) -> frozenset[str]:
    """The roles an account may have: the actors ``specs`` say are not automatic."""
    return frozenset(
        name for spec in specs for name, actor in spec.actors.items() if not actor.automatic
    )


def require_people(roles: Iterable[str], allowed: frozenset[str], where: str) -> None:
    """``AccountsError`` naming every role in ``roles`` that is no person of the
    definitions (``allowed``): an automatic actor's name, or none at all."""
    unknown = sorted(set(roles) - allowed)
    if unknown:
        raise AccountsError(
            f"{where}: role(s) {', '.join(unknown)} are no person of these definitions; "
            f"the people are: {', '.join(sorted(allowed)) or 'none'}"
        )


def _hasher() -> object:
    try:
        from argon2 import PasswordHasher
    except ImportError:
        raise AccountsError(
            f"the desk needs argon2-cffi to keep passwords; install it: {install_command('desk')}"
        ) from None
    return PasswordHasher()


def read_accounts(path: Path) -> Accounts:
    """The accounts in ``path``; ``AccountsError`` naming what is wrong with it."""
    try:
        text = _read_regular(path)
    except FileNotFoundError:
        raise AccountsError(
            f"{path}: no such accounts file; make one with: machines desk add-account NAME "
            f"--roles ROLE --accounts {path}"
        ) from None
    except OSError as exc:
        raise AccountsError(f"{path}: cannot read it: {os_reason(exc)}") from None
    except UnicodeDecodeError as exc:
        raise AccountsError(f"{path}: cannot read it: {exc}") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise AccountsError(f"{path}: not an accounts file (not JSON)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise AccountsError(f"{path}: not an accounts file of this desk (format {FORMAT})")
    raw = document.get("accounts")
    if not isinstance(raw, dict):
        raise AccountsError(f"{path}: 'accounts' must be an object of accounts by name")
    out = {}
    for name, entry in raw.items():
        where = f"{path}: account {name!r}"
        _check_name(name, where)
        if not isinstance(entry, dict) or set(entry) != {"roles", "hash"}:
            raise AccountsError(f"{where}: must hold exactly 'roles' and 'hash'")
        roles = entry["roles"]
        if not isinstance(roles, list) or not roles:
            raise AccountsError(f"{where}: 'roles' must be a non-empty list")
        _check_roles(roles, where)
        hashed = entry["hash"]
        if not isinstance(hashed, str) or not hashed.startswith("$argon2id$"):
            raise AccountsError(f"{where}: 'hash' is not an Argon2id hash")
        out[name] = Account(name, tuple(roles), hashed)
    return Accounts(path, MappingProxyType(out))


MAX_ACCOUNTS_BYTES = 16 * 1024 * 1024
"""The largest accounts file read (a few thousand accounts take well under a megabyte)."""


def _read_regular(path: Path) -> str:
    """The text of ``path`` when it is a regular file (a FIFO would wait for ever, a
    device like /dev/zero never ends), read up to ``MAX_ACCOUNTS_BYTES``."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise AccountsError(f"{path}: not a regular file (a FIFO, a device or a folder)")
        data = handle.read(MAX_ACCOUNTS_BYTES + 1)
    if len(data) > MAX_ACCOUNTS_BYTES:
        raise AccountsError(f"{path}: over {MAX_ACCOUNTS_BYTES:,} bytes: not an accounts file")
    return data.decode("utf-8")


def add_account(path: Path, name: str, roles: Sequence[str], password: str) -> Account:
    """Add ``name`` (or replace its roles and password) in ``path``, made if missing, and
    written whole or not at all, readable by its owner only."""
    _check_name(name, f"account {name!r}")
    _check_roles(roles, f"account {name!r}")
    if not isinstance(password, str) or not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise AccountsError(f"a password must have {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    if not encodable(password):
        raise AccountsError(
            "the password is not text: standard input gave bytes that are not UTF-8 (or a "
            "lone surrogate); nothing was written"
        )
    accounts = dict(read_accounts(path).by_name) if path.exists() else {}
    hasher = _hasher()
    account = Account(name, tuple(dict.fromkeys(roles)), hasher.hash(password))  # type: ignore[attr-defined]
    accounts[name] = account
    document = {
        "format": FORMAT,
        "accounts": {
            a.name: {"roles": list(a.roles), "hash": a.password_hash}
            for a in sorted(accounts.values(), key=lambda a: a.name)
        },
    }
    try:
        descriptor, made = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise AccountsError(f"{path}: cannot write the accounts: {exc.strerror or exc}") from None
    temporary = Path(made)  # a new file of its own (O_EXCL), 0600, never one planted there
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise AccountsError(f"{path}: cannot write the accounts: {exc.strerror or exc}") from None
    return account


@functools.cache
def _unknown() -> str:
    """A hash no password matches, checked for an unknown name so that signing in takes as
    long whether the name exists or not."""
    return str(_hasher().hash(secrets.token_hex(32)))  # type: ignore[attr-defined]


def verify(accounts: Accounts, name: str, password: str) -> Account | None:
    """The account of ``name`` when ``password`` is its password, else None."""
    from argon2.exceptions import InvalidHashError, VerificationError

    hasher = _hasher()
    account = accounts.by_name.get(name) if isinstance(name, str) else None
    if not isinstance(password, str) or len(password) > MAX_PASSWORD or not encodable(password):
        return None
    try:
        hasher.verify(account.password_hash if account else _unknown(), password)  # type: ignore[attr-defined]
    except (VerificationError, InvalidHashError):
        return None
    return account


def _check_name(name: object, where: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise AccountsError(
            f"{where}: a name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with "
            "a letter or digit"
        )


def _check_roles(roles: Sequence[object], where: str) -> None:
    for role in roles:
        if not isinstance(role, str) or not ROLE.fullmatch(role):
            raise AccountsError(
                f"{where}: role {role!r} is not an actor's name (lower_snake, such as operator)"
            )


def stamp_of(path: Path) -> tuple[int, ...]:
    """What changes when the accounts file is rewritten (``add-account`` renames a new file
    in): a running desk reads it again when this changes."""
    try:
        found = os.stat(path)
    except OSError:
        return ()
    return (found.st_ino, found.st_mtime_ns, found.st_size, found.st_ctime_ns)

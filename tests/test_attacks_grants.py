"""PostgreSQL: what the application's role may be granted on a store, and what every open
refuses (outsider batch 35, a B and a C).

- ``TRIGGER`` on a store table (``GRANT ALL ON ALL TABLES``, a common admin grant) let the
  application's role attach a trigger whose function lived in its own ``pg_temp``: it
  rewrote a committed result after the guards had judged the write, every later caller
  got the forged result, and the trigger vanished with the session; no open, audit or
  repair named anything.
- ``UPDATE`` on a store sequence let it ``setval`` the creation order into a gap that
  replays leave and back, so that a saga undid a session's effects out of order.

Every open now refuses while another role holds either grant, naming the table or
sequence, the role and the ``REVOKE`` that ends it; the grants the guide names
(``SELECT, INSERT, UPDATE`` on the tables, ``USAGE, SELECT`` on the sequences) open and
run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from machines.cli import main
from machines.store import open_store
from machines.store.integrity import StoreTampered
from machines.systems import ExactlyOnce
from tests.conftest import require_postgres

GUIDE_GRANTS = (
    "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
)


@contextmanager
def installed_with_an_application_role() -> Iterator[tuple[Any, str, str, str]]:
    """A store installed by the server's owner in a schema of its own, and a login role
    that owns nothing (the owner's connection, the role, the owner's URL, the role's URL);
    the role and its grants dropped after."""
    import psycopg

    from machines.store.postgres import temporary_schema

    server = require_postgres()
    role = f"app_{uuid.uuid4().hex[:8]}"
    with temporary_schema(server) as url, psycopg.connect(url, autocommit=True) as conn:
        (schema,) = conn.execute(b"SELECT current_schema()").fetchone() or ("",)
        conn.execute(f"CREATE ROLE {role} LOGIN".encode())
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}'.encode())
        try:
            open_store(url).close()
            for grant in GUIDE_GRANTS:
                conn.execute(grant.format(schema=f'"{schema}"', role=role).encode())
            yield conn, role, url, url.replace("://postgres@", f"://{role}@", 1)
        finally:
            conn.execute(f"DROP OWNED BY {role} CASCADE".encode())
            conn.execute(f"DROP ROLE {role}".encode())


def test_the_grants_the_guide_names_open_and_run() -> None:
    with installed_with_an_application_role() as (_, _, _, app), open_store(app) as store:
        assert ExactlyOnce(store, worker="w").run("k", lambda: 1) == 1


@pytest.mark.parametrize(
    ("grant", "names", "revoke"),
    [
        (
            "GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}",
            "request_moves: {role} may attach a trigger of its own to them",
            "REVOKE TRIGGER ON ALL TABLES IN SCHEMA {schema} FROM {role}",
        ),
        (
            "GRANT TRIGGER ON outcome_entities TO PUBLIC",
            "tables outcome_entities: PUBLIC may attach a trigger of its own",
            "REVOKE TRIGGER ON outcome_entities FROM PUBLIC",
        ),
        (
            "GRANT UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
            "sequences effect_entities_ordinal_seq, machines_definitions_ordinal_seq, "
            "node_entities_ordinal_seq, outcome_entities_ordinal_seq, "
            "request_entities_ordinal_seq: {role} may set their creation order",
            "REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA {schema} FROM {role}",
        ),
    ],
    ids=["trigger-by-grant-all", "trigger-to-public", "sequence-update"],
)
def test_a_grant_that_lets_the_application_outrun_the_guards_is_refused_on_open(
    grant: str, names: str, revoke: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with installed_with_an_application_role() as (conn, role, url, app):
        schema = conn.execute(b"SELECT current_schema()").fetchone()[0]
        conn.execute(grant.format(schema=f'"{schema}"', role=role).encode())
        for who in (url, app):
            with pytest.raises(StoreTampered) as refused:
                open_store(who)
            said = str(refused.value)
            assert names.format(role=role) in said, said
            assert "REVOKE" in said
        capsys.readouterr()
        assert main(["audit", "--from-store", url]) == 2  # read nothing, as for CREATE
        assert names.format(role=role) in capsys.readouterr().err
        conn.execute(revoke.format(schema=f'"{schema}"', role=role).encode())
        with open_store(app) as store:
            assert ExactlyOnce(store, worker="w").run("k", lambda: 1) == 1


@pytest.mark.parametrize("scope", ["IN SCHEMA {schema} ", ""], ids=["in-the-schema", "everywhere"])
@pytest.mark.parametrize(
    ("kind", "privilege"),
    [("TABLES", "TRIGGER"), ("SEQUENCES", "UPDATE")],
    ids=["trigger", "setval"],
)
def test_default_privileges_that_would_grant_it_are_refused_before_the_install(
    scope: str, kind: str, privilege: str
) -> None:
    """Outsider batch 36 (a A): ``ALTER DEFAULT PRIVILEGES ... GRANT TRIGGER ON TABLES``
    gave the application's role its trigger on the tables the first open installed, and
    that open never looked again; its trigger rewrote a committed result before the next
    open named the grant. The owner's default privileges are read before the install, and
    the grants after it; the store installs only once they are revoked."""
    import psycopg

    from machines.store.postgres import temporary_schema

    role = f"app_{uuid.uuid4().hex[:8]}"
    with temporary_schema(require_postgres()) as url, psycopg.connect(url, autocommit=True) as c:
        (schema,) = c.execute(b"SELECT current_schema()").fetchone() or ("",)
        c.execute(f"CREATE ROLE {role}".encode())
        where = scope.format(schema=f'"{schema}"')
        try:
            c.execute(
                f"ALTER DEFAULT PRIVILEGES {where}GRANT {privilege} ON {kind} TO {role}".encode()
            )
            with pytest.raises(StoreTampered, match=f"{role} is given {privilege} on every"):
                open_store(url)
            assert c.execute(b"SELECT to_regclass('machines_definitions')").fetchone() == (None,)
            c.execute(
                f"ALTER DEFAULT PRIVILEGES {where}REVOKE {privilege} ON {kind} FROM {role}".encode()
            )
            open_store(url).close()
        finally:
            c.execute(f"ALTER DEFAULT PRIVILEGES {where}REVOKE ALL ON {kind} FROM {role}".encode())
            c.execute(f"DROP OWNED BY {role} CASCADE".encode())
            c.execute(f"DROP ROLE {role}".encode())


def test_an_auditor_granted_the_tables_alone_is_told_what_else_to_grant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Outsider batch 45 (c F2): a role with SELECT on the store's tables alone could not
    audit ("permission denied for sequence ...", exit 2) and was not told why. The
    refusal names what a reading role needs; with the sequences granted too, it audits."""
    with installed_with_an_application_role() as (conn, role, _, app):
        (schema,) = conn.execute(b"SELECT current_schema()").fetchone() or ("",)
        conn.execute(f'REVOKE ALL ON ALL SEQUENCES IN SCHEMA "{schema}" FROM {role}'.encode())
        conn.execute(
            f'REVOKE INSERT, UPDATE ON ALL TABLES IN SCHEMA "{schema}" FROM {role}'.encode()
        )
        assert main(["audit", "--from-store", app]) == 2
        said = capsys.readouterr().err
        assert "permission denied" in said and "GRANT SELECT ON ALL SEQUENCES IN SCHEMA" in said
        conn.execute(f'GRANT SELECT ON ALL SEQUENCES IN SCHEMA "{schema}" TO {role}'.encode())
        assert main(["audit", "--from-store", app]) == 0, capsys.readouterr()

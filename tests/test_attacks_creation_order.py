"""The PostgreSQL store's creation order (``ordinal``, the order a saga undoes a session's
effects in, newest first) is drawn from its own sequence, as BIGSERIAL makes it; a store
whose sequence the owner changed is refused on open, naming the table.

Outsider batch 34 (F2): ``ALTER SEQUENCE ... MINVALUE -100 MAXVALUE 3 CYCLE`` opened clean
and the audit said OK, and every entity made after it took a place before the older ones
(or, without the lower bound, every new claim failed on a taken place). Only a sequence
made to count down was named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from machines.cli import main
from machines.spec.loader import bundled_spec_dir
from machines.store import open_store
from machines.store.integrity import StoreTampered
from tests.raw_sql import Victims, attacked

SEQUENCE = '"effect_entities_ordinal_seq"'


@pytest.fixture
def victims(tmp_path: Path) -> Iterator[Victims]:
    with attacked("postgres", tmp_path) as found:
        found.store.close()
        yield found


def owner(victims: Victims, statement: str) -> None:
    victims.raw.pg.execute(statement.encode())


def refused_then_repaired(victims: Victims, says: str) -> None:
    """Refused on open and named by the audit; ``machines repair`` puts the sequence back,
    and the next entity takes the next place."""
    url = victims.store.url
    with pytest.raises(StoreTampered) as caught:
        open_store(url)
    assert "table effect_entities: " + says in str(caught.value), str(caught.value)
    assert f"machines repair '{url}'" in str(caught.value)
    assert main(["audit", "--from-store", url]) == 1
    assert main(["repair", url, "--spec-dir", str(bundled_spec_dir()), "--by", "owner"]) == 0
    store = open_store(url)
    store.insert("effect", "after", context={"tier": "compensable"})
    store.close()
    ordinals = victims.raw.pg.execute(
        b"SELECT key, ordinal FROM effect_entities ORDER BY ordinal"
    ).fetchall()
    assert ordinals[-1][0] == "after" and ordinals[-1][1] > 0, ordinals
    assert main(["audit", "--from-store", url]) == 0


@pytest.mark.parametrize(
    "change",
    [
        "INCREMENT BY -1 MINVALUE -1000000 RESTART WITH 1000",  # outsider batch 2
        "MINVALUE -100 MAXVALUE 3 CYCLE",
        "MAXVALUE 3 CYCLE",
        "CYCLE",
        "MAXVALUE 1000",
        "MINVALUE 0",
        "INCREMENT BY 2",
        "CACHE 50",  # outsider batch 35 (a A): two sessions took places out of order
        "SET UNLOGGED",  # batch 35 (a E): a crash would set it back to 1
    ],
)
def test_a_sequence_not_as_bigserial_makes_it_is_named(victims: Victims, change: str) -> None:
    owner(victims, f"ALTER SEQUENCE {SEQUENCE} {change}")
    refused_then_repaired(victims, "its creation order is not drawn, rising, from its own sequence")


def test_a_sequence_set_back_to_a_taken_place_is_named(victims: Victims) -> None:
    """A ``RESTART`` lower leaves the sequence's settings as they were; what it changes
    is the next place, which an entity already holds."""
    owner(victims, f"ALTER SEQUENCE {SEQUENCE} RESTART WITH 1")
    refused_then_repaired(
        victims, "its creation-order sequence was set back to a place an entity holds"
    )


@pytest.mark.parametrize("change", ["RESTART WITH 1000000", "START WITH 7", "CACHE 1"])
def test_a_sequence_moved_on_or_left_in_order_opens(victims: Victims, change: str) -> None:
    owner(victims, f"ALTER SEQUENCE {SEQUENCE} {change}")
    store = open_store(victims.store.url)
    store.insert("effect", "later", context={"tier": "compensable"})
    store.close()
    assert main(["audit", "--from-store", victims.store.url]) == 0

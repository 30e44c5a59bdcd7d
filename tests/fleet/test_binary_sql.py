"""fleet.binary_sql: bytes in and out in binary, inside Django's own transaction."""

from __future__ import annotations

import os

import pytest
from django.db import connection, transaction

from fleet import binary_sql


@pytest.fixture
def table(db: None) -> str:
    with connection.cursor() as cur:
        cur.execute("CREATE TEMP TABLE blobs (id serial PRIMARY KEY, body bytea NOT NULL)")
    return "blobs"


BODIES = [b"", b"\x00", b"\x00\xff" * 1000, os.urandom(3 << 20), "é\ud800".encode(
    "utf-8", "surrogatepass")]


def test_bytes_round_trip_exactly(table: str) -> None:
    for body in BODIES:
        [(pk,)] = binary_sql.execute(f"INSERT INTO {table} (body) VALUES (%b) RETURNING id",
                                     [body], fetch=True)
        [(back,)] = binary_sql.execute(f"SELECT body FROM {table} WHERE id = %s", [pk],
                                       fetch=True)
        assert bytes(back) == body
        with connection.cursor() as cur:  # Django's own reading agrees
            cur.execute(f"SELECT body FROM {table} WHERE id = %s", [pk])
            assert bytes(cur.fetchone()[0]) == body


def test_it_is_part_of_the_open_transaction(table: str) -> None:
    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        binary_sql.execute(f"INSERT INTO {table} (body) VALUES (%b)", [b"gone"])
        with connection.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {table}")
            assert cur.fetchone()[0] == 1  # Django sees it inside the transaction
        raise Undo
    assert binary_sql.execute(f"SELECT count(*) FROM {table}", fetch=True) == [(0,)]

"""Postgres advisory lock keys: one definition for every lock the server takes by name.

A key is the first 8 bytes of the name's sha256 as a signed 64-bit integer, so a name
(a fleet's render, a host's spool follower, an object store key) maps to the same lock in
every process on every host that shares the database.
"""

from __future__ import annotations

import hashlib

from django.db import connection


def advisory_key(name: str) -> int:
    """A Postgres advisory lock key (signed 64-bit) for a lock's name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def hold_for_transaction(name: str) -> None:
    """Take the named lock until the current transaction ends (waiting for it if held)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(name)])


def render_lock(fleet_id: int) -> str:
    """The name of a fleet's render lock."""
    return f"ctxlake.render:{fleet_id}"


def hold_render_lock(fleet_id: int) -> None:
    """The fleet's render lock, until the current transaction ends: renders of one fleet run
    one at a time (ctxlake_site.workers.render_fleet), and a fleet is deleted only between
    two renders (fleet.deletion), never while one is about to publish rows pointing at it."""
    hold_for_transaction(render_lock(fleet_id))

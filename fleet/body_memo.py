"""Rendered files' bodies a process has read, kept by ETag: read once, served many times.

When a render lands, every agent host asks for the same new files: 50 hosts' long-poll
answers (fleet.api_changes inlines the small files) and GETs of cache/<name> each read
the same ~100 KB roster from Postgres, or from the object store. An ETag is the first
ETAG_HEX hex digits of the body's sha256 (contract.etag_of), so a body kept under its
fleet and ETag can never be stale: a new render with other bytes has another ETag, and
the same ETag is the same bytes. Nothing needs invalidating; old bodies age out.

Kept in this process's memory through Django's local-memory cache (settings.CACHES
"rendered-bodies": least recently used dropped past its MAX_ENTRIES), and only bodies of
at most MAX_BODY_BYTES, so a process holds at most MAX_ENTRIES × MAX_BODY_BYTES; a large
fleet's snapshot (megabytes; hosts fetch deltas) is never kept. Every read through
fleet.artifacts feeds it, so a task worker that reads a small fleet's snapshot keeps it too.
"""

from __future__ import annotations

from django.core.cache import caches

#: The settings.CACHES alias of the kept bodies.
ALIAS = "rendered-bodies"
#: Bodies larger than this are read every time (the snapshot; an outsized roster).
MAX_BODY_BYTES = 1 << 20


def _key(fleet_id: int, etag: str) -> str:
    return f"{fleet_id}:{etag}"


def get(fleet_id: int, etag: str) -> bytes | None:
    """The body of the fleet's file with this ETag, if this process has read it."""
    body = caches[ALIAS].get(_key(fleet_id, etag))
    return body if isinstance(body, bytes) else None


def put(fleet_id: int, etag: str, body: bytes) -> None:
    """Keep `body`, read as the fleet's file with this ETag (unless it is too large)."""
    if len(body) <= MAX_BODY_BYTES:
        caches[ALIAS].set(_key(fleet_id, etag), body, timeout=None)


def clear() -> None:
    """Forget every kept body (tests that make this process read a body afresh)."""
    caches[ALIAS].clear()

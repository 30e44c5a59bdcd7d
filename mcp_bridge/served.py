"""Which claims this session was shown: claim.served spool events, written off the
answer's path, at most one per answer.

The usefulness loop (docs/usefulness.md) needs to know what each session saw; the agent
must not wait for it. So a tool answer only queues the ids here, and one writer thread
spools them (lock, write, fsync) while the answer goes out. The writer gathers what
answers noted within COALESCE_SECS into one event per door (the server
counts sessions, not showings), so a burst of searches costs one fsync, not one each. A
bridge killed in that gap loses the record of what it showed, never a write the agent
asked for: served events are telemetry, and the tallies they feed tolerate a missing one.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Iterable
from typing import Any

from mcp_bridge.contract import events as ev
from mcp_bridge.contract.spool import Spool

#: How often the writer spools what answers noted since its last pass.
COALESCE_SECS = 0.5


class Served:
    """Collects what a session was shown; a daemon thread spools it every COALESCE_SECS.

    `note` only appends under a lock: it wakes no thread, so the answer it is part of
    never waits for the writer (a woken thread would take the GIL from the answer).
    """

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._pending: list[tuple[list[str], str]] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.written = 0
        self.failed = 0

    def note(self, claims: Iterable[Any], via: str) -> None:
        """Record that these claims (dicts with an "id", or ids) were shown through `via`.
        Ids that are not claim ids (a test snapshot's) are left out; nothing raises."""
        valid = claim_ids(claims)
        if not valid or not self.spool.session:
            return
        with self._lock:
            self._pending.append((valid, via))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ctxlake-served",
                                                daemon=True)
                self._thread.start()
                atexit.register(self.flush)

    def _run(self) -> None:
        while True:
            time.sleep(COALESCE_SECS)
            self.flush()

    def flush(self) -> None:
        """Spool everything noted so far: one event per door, ids merged."""
        with self._write_lock:
            with self._lock:
                batch, self._pending = self._pending, []
            for via, ids in _merged(batch):
                try:
                    self.spool.append(ev.KIND_CLAIM_SERVED, {"claims": ids, "via": via})
                    self.written += 1
                except Exception:  # a full or unwritable spool costs the record only
                    self.failed += 1


def _merged(batch: list[tuple[list[str], str]]) -> list[tuple[str, list[str]]]:
    """(via, ids) per door, ids in first-shown order, split at the contract's limit."""
    by_via: dict[str, dict[str, None]] = {}
    for ids, via in batch:
        by_via.setdefault(via, {}).update(dict.fromkeys(ids))
    return [(via, chunk[i:i + ev.CLAIM_IDS_MAX])
            for via, seen in by_via.items() for chunk in [list(seen)]
            for i in range(0, len(chunk), ev.CLAIM_IDS_MAX)]


def claim_ids(claims: Iterable[Any]) -> list[str]:
    """The distinct claim ids among `claims` (dicts with an "id", or ids), at most as many
    as one served event names; anything that is not a claim id is left out."""
    ids = [c.get("id") if isinstance(c, dict) else c for c in claims]
    return list(dict.fromkeys(i for i in ids if isinstance(i, str)
                              and ev.CLAIM_ID_RE.fullmatch(i)))[:ev.CLAIM_IDS_MAX]

"""Which claims this session was shown: one claim.served spool event per answer, written
off the answer's path.

The usefulness loop (docs/usefulness.md) needs to know what each session saw; the agent
must not wait for it. So a tool answer only queues the ids here, and one writer thread
spools them (lock, write, fsync) while the answer goes out. A bridge killed in that gap
loses the record of what it showed, never a write the agent asked for: served events are
telemetry, and the tallies they feed tolerate a missing one.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Iterable
from typing import Any

from mcp_bridge.contract import events as ev
from mcp_bridge.contract.spool import Spool

#: How long exit waits for queued records to reach the spool.
FLUSH_SECS = 2.0


class Served:
    """Queues what a session was shown and spools it from one daemon thread."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._queue: queue.Queue[tuple[list[str], str] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.written = 0
        self.failed = 0

    def note(self, claims: Iterable[Any], via: str) -> None:
        """Record that these claims (dicts with an "id", or ids) were shown through `via`.
        Ids that are not claim ids (a test snapshot's) are left out; nothing raises."""
        ids = [c.get("id") if isinstance(c, dict) else c for c in claims]
        valid = list(dict.fromkeys(i for i in ids if isinstance(i, str)
                                   and ev.CLAIM_ID_RE.fullmatch(i)))[:ev.CLAIM_IDS_MAX]
        if valid and self.spool.session:
            self._start()
            self._queue.put((valid, via))

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ctxlake-served",
                                                daemon=True)
                self._thread.start()
                atexit.register(self.flush)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self.spool.append(ev.KIND_CLAIM_SERVED, {"claims": item[0], "via": item[1]})
                self.written += 1
            except Exception:  # a full or unwritable spool costs the record, not the bridge
                self.failed += 1
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def flush(self, timeout: float = FLUSH_SECS) -> None:
        """Wait (bounded) until every queued record has been written or has failed."""
        if self._thread is None:
            return
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        done.wait(timeout)

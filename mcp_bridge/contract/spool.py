"""Spool.append(): one durable JSON line per write-tool call, for the drain to apply.

The bridge cannot observe the fleet, so a write is done when it is durably queued here.
Many bridge processes (one per agent session) append to the same fleet file, so every
append holds an exclusive flock on a sibling lock file (stable across rotation).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from mcp_bridge import contract
from mcp_bridge.contract import atomic, events
from mcp_bridge.contract.ids import random_uuid

MAX_LINE_BYTES = 256 * 1024


class SpoolFull(Exception):
    """The spool is at its size cap; the message says what the agent can do."""


class Refused(ValueError):
    """The event breaks the contract (events.problem); nothing was written.

    Checked here, in the one writer every bridge-side path uses (tools, hooks, sync), so
    no line the drain would refuse is ever queued.
    """


class Receipt(NamedTuple):  # not a dataclass: the PreToolUse hook spools, and cannot pay
    event_id: str          # ~13 ms for importing dataclasses (and inspect)
    kind: str
    queued_at: str

    def as_dict(self) -> dict[str, Any]:
        return {"status": "queued for sync", "event_id": self.event_id, "kind": self.kind,
                "queued_at": self.queued_at}


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Spool:
    def __init__(self, spool_dir: Path, *, fleet: str, agent: str, session: str | None = None,
                 max_bytes: int = 64 << 20, file_max_bytes: int = 8 << 20) -> None:
        self.dir = Path(spool_dir) / contract.SPOOL_SUBDIR
        self.fleet, self.agent, self.session = fleet, agent, session
        self.max_bytes, self.file_max_bytes = max_bytes, file_max_bytes
        self.path = self.dir / f"{fleet}{contract.SPOOL_SUFFIX}"
        self.lock_path = self.dir / f"{fleet}{contract.SPOOL_LOCK_SUFFIX}"

    def record(self, kind: str, payload: dict[str, Any], event_id: str | None = None,
               ) -> tuple[dict[str, Any], Receipt]:
        now = iso(utc_now())
        event: dict[str, Any] = {
            "v": contract.SPOOL_VERSION, "id": event_id or random_uuid(), "kind": kind,
            "fleet": self.fleet, "agent": self.agent, "session": self.session, "at": now,
            "payload": payload}
        return event, Receipt(event_id=event["id"], kind=kind, queued_at=now)

    def append(self, kind: str, payload: dict[str, Any], *, event_id: str | None = None,
               ) -> Receipt:
        """Queue one event durably (under `event_id` when the caller names it: a retry that
        must not count twice; else a fresh one).

        1. Serialise first (ASCII JSON, one line), so nothing can fail half-written.
        2. Take the fleet's exclusive lock; every check below holds under it.
        3. Refuse past the directory cap (SpoolFull) before touching any file.
        4. Rotate the active file if this line would take it past its own cap.
        5. Append with O_APPEND (after a newline if a crashed writer left a torn line),
           fsync the file, and fsync the directory if the file was just created.
        """
        event, receipt = self.record(kind, payload, event_id)
        problem = contract.envelope_problem(event, self.fleet, fleet_source="this spool's fleet")
        problem = problem or events.problem(kind, payload)
        if problem:
            raise Refused(problem)
        line = (json.dumps(event, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:
            raise SpoolFull(f"this request is {len(line)} bytes; the limit is {MAX_LINE_BYTES}."
                            " Shorten the text fields and retry.")
        with self.locked():
            self.append_locked(line)
        return receipt

    def locked(self) -> Flock:
        """The fleet's exclusive append lock (creates the spool directory first).

        Hold it to make a check and an append one step, as the server's spool upload does
        for event ids; `append_locked` then writes under it.
        """
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic.fsync_dir(self.dir.parent)
        return Flock(self.lock_path)

    def append_locked(self, blob: bytes) -> None:
        """Append complete lines (one write, one fsync); the caller holds `locked()`.

        Refuses past the directory cap (SpoolFull) before touching any file and rotates
        the active file first if `blob` would take it past its own cap.
        """
        self._check_cap(len(blob))
        if self._size(self.path) + len(blob) > self.file_max_bytes:
            self._rotate()
        self._write(blob)

    def used_bytes(self) -> int:
        return sum(self._size(p) for p in self.dir.glob(f"*{contract.SPOOL_SUFFIX}"))

    def _check_cap(self, incoming: int) -> None:
        used = self.used_bytes()
        if used + incoming > self.max_bytes:
            raise SpoolFull(
                f"The local spool is full ({used} of {self.max_bytes} bytes in {self.dir}) "
                "because the ctxlake drain has not synced it; nothing was queued. Ask the "
                "operator to run the ctxlake workers (qcluster), or retry later.")

    def _rotate(self) -> None:
        if not self.path.exists():
            return
        stamp = utc_now().strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.dir / f"{self.fleet}.{stamp}{contract.SPOOL_SUFFIX}"
        n = 1
        while target.exists():
            target = self.dir / f"{self.fleet}.{stamp}-{n}{contract.SPOOL_SUFFIX}"
            n += 1
        os.rename(self.path, target)
        atomic.fsync_dir(self.dir)

    def _write(self, line: bytes) -> None:
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if not created and _ends_torn(fd):
                line = b"\n" + line  # never glue a complete line onto a torn fragment
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            atomic.fsync_dir(self.dir)

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0


class Flock:
    """An exclusive flock on a lock file, held for the `with` block."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> Flock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read_events(spool_dir: Path, fleet: str) -> list[dict[str, Any]]:
    """Every complete, parseable event of a fleet, rotated files first (drain order)."""
    root = Path(spool_dir) / contract.SPOOL_SUBDIR
    active = root / f"{fleet}{contract.SPOOL_SUFFIX}"
    rotated = sorted(p for p in root.glob(f"{fleet}.*{contract.SPOOL_SUFFIX}") if p != active)
    events: list[dict[str, Any]] = []
    for path in [*rotated, active]:
        if not path.exists():
            continue
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line waits for the next pass
        for raw in complete.splitlines():
            try:
                events.append(json.loads(raw))
            except ValueError:
                continue  # a torn fragment a later append closed off; the drain logs it
    return events

"""Cache: reads one fleet's rendered files, honestly.

Every read answers (value, note). A file that is missing, unparseable, of the wrong format
version or for another fleet gives value None and a note saying which — the tool turns
that into an empty result, never an error and never a guess. Values are sanitised once per
file version (keyed by inode, mtime and size: the renderer replaces files atomically).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from mcp_bridge import contract
from mcp_bridge.contract.sanitize import clean_value

if TYPE_CHECKING:
    from mcp_bridge.snapshot import Snapshot

MAX_FILE_BYTES = 32 * 1024 * 1024  # a cache JSON file bigger than this is not ours
SYNC_STATE_FILE = ".sync-state.json"  # present in a cache that `sync` keeps in step


class Read(NamedTuple):  # not a dataclass: hooks cannot pay for importing `inspect`
    value: Any = None
    note: str | None = None


class Cache:
    def __init__(self, fleet_dir: Path, *, fleet: str, max_chars: int = 2000) -> None:
        self.dir = Path(fleet_dir)
        self.fleet = fleet
        self.max_chars = max_chars
        self._memo: dict[str, tuple[tuple[int, int, int], Read]] = {}
        self._snapshot: tuple[tuple[int, int, int], Snapshot] | None = None

    def unknown_fleet(self) -> str | None:
        """The plain note for a fleet this host has no cache for, else None.

        No manifest means the fleet does not exist on the server (a mistyped
        CTXLAKE_FLEET_ID: writes queue up and are never applied), or exists but has not
        been rendered (or synced) here yet. The bridge cannot tell which, so it says both,
        on every tool's answer, instead of "queued for sync" alone.
        """
        if (self.dir / contract.MANIFEST).is_file():
            return None
        return (f"fleet {self.fleet!r} is unknown here: no cache has been rendered for it "
                f"(looked in {self.dir}). If no such fleet exists on the ctxlake server, "
                "nothing queued here will be applied until an operator runs "
                f"`manage.py create_fleet {self.fleet}` (or CTXLAKE_FLEET_ID is corrected); "
                "if it was just created, the workers (or `python -m mcp_bridge sync` on "
                "another host) bring its cache here.")

    def manifest(self) -> Read:
        read = self._load(contract.MANIFEST)
        if read.value is None:
            unknown = self.unknown_fleet()
            return Read(note=f"no {contract.MANIFEST} rendered yet. {unknown}") if unknown \
                else read
        m = read.value
        if m.get("fleet") != self.fleet:
            return Read(note=f"{contract.MANIFEST} is for fleet {m.get('fleet')!r}, not "
                             f"{self.fleet!r}; not reading it")
        if m.get("memory_mode") not in contract.MEMORY_MODES:
            m = {**m, "memory_mode": "off"}  # unknown mode: the safe reading is "nothing"
        return Read(value=m)

    def read(self, name: str) -> Read:
        """A JSON cache file, after the manifest vouches for the cache as a whole."""
        manifest = self.manifest()
        if manifest.value is None:
            return manifest
        read = self._load(name)
        if read.value is not None and read.value.get("fleet", self.fleet) != self.fleet:
            return Read(note=f"{name} is for another fleet; not reading it")
        return read

    def _load(self, name: str) -> Read:
        path = self.dir / name
        try:
            st = path.stat()
        except FileNotFoundError:
            return Read(note=f"no {name} rendered yet for fleet {self.fleet!r} (looked in "
                             f"{self.dir}); the ctxlake workers write it")
        except OSError as e:
            return Read(note=f"cannot read {name}: {e.strerror}")
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        memo = self._memo.get(name)
        if memo and memo[0] == key:
            return memo[1]
        read = self._parse(path, name, st.st_size)
        self._memo[name] = (key, read)
        return read

    def _parse(self, path: Path, name: str, size: int) -> Read:
        if size > MAX_FILE_BYTES:
            return Read(note=f"{name} is {size} bytes, over the {MAX_FILE_BYTES} limit; ignored")
        try:
            raw = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError) as e:
            return Read(note=f"{name} is unparseable ({type(e).__name__}); ignored until the "
                             "next render")
        if not isinstance(raw, dict):
            return Read(note=f"{name} is not a JSON object; ignored")
        version = raw.get("format_version")
        if version != contract.FORMAT_VERSION:
            return Read(note=f"{name} has format_version {version!r}; this bridge reads "
                             f"{contract.FORMAT_VERSION}. Upgrade the bridge or re-render.")
        return Read(value=clean_value(raw, self.max_chars))

    def snapshot(self) -> Read:
        """The open Snapshot (reopened when the renderer replaced the file)."""
        path = self.dir / contract.SNAPSHOT
        try:
            st = path.stat()
        except FileNotFoundError:
            return Read(note=f"no {contract.SNAPSHOT} rendered for fleet {self.fleet!r}")
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._snapshot and self._snapshot[0] == key:
            return Read(value=self._snapshot[1])
        from mcp_bridge.snapshot import Snapshot, SnapshotError

        if self._snapshot:
            self._snapshot[1].close()
            self._snapshot = None
        try:
            snap = Snapshot(path, fleet=self.fleet, max_chars=self.max_chars)
        except SnapshotError as e:
            return Read(note=str(e))
        self._snapshot = (key, snap)
        return Read(value=snap)

    def briefing(self) -> str | None:
        try:
            with open(self.dir / contract.BRIEFING, "rb") as f:
                data = f.read(1024 * 1024)
        except OSError:
            return None
        return cast(str, clean_value(data.decode("utf-8", "replace"), max_chars=64 * 1024))



class Backlog(NamedTuple):  # not a dataclass, as Read: the hooks import this module
    """This host's queued writes the cache does not reflect yet (see `spool_backlog`)."""

    lines: int
    oldest_secs: float | None
    capped: bool
    rejected: int
    last_rejection: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"unsent_lines": self.lines, "unsent_more": self.capped,
                "oldest_unsent_secs": None if self.oldest_secs is None
                else round(self.oldest_secs), "rejected_lines": self.rejected,
                "last_rejection": self.last_rejection}


SCAN_LINES = 5000  # fleet_status reads at most this many spool lines back


def spool_backlog(spool_dir: Path, fleet: str, rendered_at: dt.datetime | None, *,
                  synced: bool, now: dt.datetime) -> Backlog:
    """Lines this host queued that the cache does not show yet, and what the server refused.

    On a host kept in step by `sync`, every line still in the spool is unsent (sync
    removes what the server acknowledged). On the server's own host the drain leaves
    applied lines in place, so only lines written after the cache's render count. Reads
    backwards, at most SCAN_LINES lines; `capped` says there are more.
    """
    root = Path(spool_dir) / contract.SPOOL_SUBDIR
    active = root / f"{fleet}{contract.SPOOL_SUFFIX}"
    rotated = sorted((p for p in root.glob(f"{fleet}.*{contract.SPOOL_SUFFIX}") if p != active),
                     reverse=True)
    count, oldest, capped = 0, None, False
    for path in [active, *rotated]:
        for line in _lines_backwards(path):
            if not line.strip() or _SERVED in line:  # telemetry, not the agent's writes
                continue
            at = _event_time(line)
            if not synced and rendered_at is not None and at is not None and at <= rendered_at:
                return _with_rejections(spool_dir, fleet, count, oldest, capped, now)
            if count >= SCAN_LINES:
                capped = True
                return _with_rejections(spool_dir, fleet, count, oldest, capped, now)
            count += 1
            oldest = at or oldest
    return _with_rejections(spool_dir, fleet, count, oldest, capped, now)


def _with_rejections(spool_dir: Path, fleet: str, count: int, oldest: dt.datetime | None,
                     capped: bool, now: dt.datetime) -> Backlog:
    rejected, last = 0, None
    for line in _lines_backwards(Path(spool_dir) / "rejected" / f"{fleet}{contract.SPOOL_SUFFIX}"):
        if not line.strip():
            continue
        if last is None:
            try:
                last = str(json.loads(line).get("reason") or "rejected")[:300]
            except (ValueError, AttributeError):
                last = "rejected"
        rejected += 1
    return Backlog(count, None if oldest is None else (now - oldest).total_seconds(), capped,
                   rejected, last)


#: How a claim.served line (what a session was shown) reads in the spool's compact JSON.
_SERVED = f'"kind":"{contract.KIND_CLAIM_SERVED}"'.encode()


def _event_time(line: bytes) -> dt.datetime | None:
    try:
        return contract.parse_time(json.loads(line).get("at"))
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return None


def _lines_backwards(path: Path, block: int = 1 << 16) -> Iterator[bytes]:
    """Complete lines of `path`, last first (a torn last line is skipped)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError:
        return
    with f:
        pos = f.seek(0, 2)
        buf, found_end = b"", False
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            buf = f.read(pos - start) + buf
            pos = start
            if not found_end:
                cut = buf.rfind(b"\n")
                if cut < 0:
                    continue  # still inside the torn last line
                buf, found_end = buf[:cut], True
            parts = buf.split(b"\n")
            buf = parts[0]  # may continue in the bytes before `start`
            yield from reversed(parts[1:])
        if found_end and buf:
            yield buf

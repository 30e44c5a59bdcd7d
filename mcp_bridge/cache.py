"""Cache: reads one fleet's rendered files, honestly.

Every read answers (value, note). A file that is missing, unparseable, of the wrong format
version or for another fleet gives value None and a note saying which — the tool turns
that into an empty result, never an error and never a guess. Values are sanitised once per
file version (keyed by inode, mtime and size: the renderer replaces files atomically).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mcp_bridge import contract
from mcp_bridge.contract.sanitize import clean_value

if TYPE_CHECKING:
    from mcp_bridge.snapshot import Snapshot

MAX_FILE_BYTES = 32 * 1024 * 1024  # a cache JSON file bigger than this is not ours


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

    def manifest(self) -> Read:
        read = self._load(contract.MANIFEST)
        if read.value is None:
            return read
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
        return clean_value(data.decode("utf-8", "replace"), max_chars=64 * 1024)


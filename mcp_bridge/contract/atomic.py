"""Writing files so that a reader sees the whole old file or the whole new one.

Temp file in the same directory → write → fsync → os.replace → fsync the directory. The
cache contract requires it of the server's renderer, and the bridge's spool, sync and
install write the same way; stdlib only, so both sides import this one module.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from pathlib import Path
from typing import Any


def fsync_dir(directory: Path) -> None:
    """Make a rename or create in `directory` durable (a no-op where dirs cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:  # pragma: no cover - platform without directory fds
        if e.errno in (errno.EISDIR, errno.EACCES):
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_stale_temps(directory: Path, *, older_than_secs: float = 600) -> int:
    """Delete temp files a killed render left behind (never a concurrent render's fresh one)."""
    cutoff = time.time() - older_than_secs
    removed = 0
    for tmp in directory.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed += 1
    return removed


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    tmp = temp_path(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def publish(tmp: Path, path: Path) -> None:
    """Move an already-fsynced temp file (e.g. a finished SQLite snapshot) into place."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)

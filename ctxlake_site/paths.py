"""Where ctxlake keeps its local state: one root, everything else derived from it.

Kept free of Django so the start-up script and the embedded database can use it before
settings are loaded.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("CTXLAKE_HOME") or Path.home() / ".ctxlake").expanduser()


def cache_dir() -> Path:
    return Path(os.environ.get("CTXLAKE_CACHE_DIR") or home() / "cache").expanduser()


def spool_dir() -> Path:
    return Path(os.environ.get("CTXLAKE_SPOOL_DIR") or home() / "spool").expanduser()


def pg_data_dir() -> Path:
    return home() / "pg"

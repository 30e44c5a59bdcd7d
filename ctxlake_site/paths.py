"""Where the server keeps its local state: the contract's places, plus the database's.

The home, cache and spool rules live in mcp_bridge.contract.places (the bridge resolves
them too); this module adds what only the server has. Kept free of Django so the
start-up script and the embedded database can use it before settings are loaded.
"""

from __future__ import annotations

from pathlib import Path

from mcp_bridge.contract.places import cache_dir, home, spool_dir

__all__ = ["cache_dir", "home", "pg_data_dir", "spool_dir"]


def pg_data_dir() -> Path:
    return home() / "pg"

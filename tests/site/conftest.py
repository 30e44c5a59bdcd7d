from __future__ import annotations

from pathlib import Path

import pytest

from mcp_bridge.contract.spool import Spool


@pytest.fixture
def spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private spool and cache for the test; the database server stays the shared one."""
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "spool"


@pytest.fixture
def spool_for(spool_dir: Path):  # type: ignore[no-untyped-def]
    """spool_for(fleet, agent, session=None) → the bridge's own Spool writer."""

    def make(fleet: str, agent: str, session: str | None = None, **kw: int) -> Spool:
        return Spool(spool_dir, fleet=fleet, agent=agent, session=session, **kw)

    return make


from tests.fleet.conftest import api_as  # noqa: E402, F401 - REST clients for site tests too

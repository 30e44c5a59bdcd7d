"""Fixtures for the bridge suite: a tmp cache + spool per test, and prebuilt claim sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import testing, tools
from mcp_bridge.config import Config
from tests.mcp_bridge.data import AGENT, CLAIMS, FLEET, TIMELINE, ago, ahead


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config.from_env({"CTXLAKE_HOME": str(tmp_path), "CTXLAKE_FLEET_ID": FLEET,
                            "CTXLAKE_AGENT_ID": AGENT, "CTXLAKE_SESSION_ID": "sess-1"})


@pytest.fixture
def bridge(config: Config) -> tools.Bridge:
    return tools.Bridge.from_config(config)


@pytest.fixture(scope="session")
def claim_vectors() -> Any:
    from mcp_bridge.contract import embed

    return embed.embed([c["text"] for c in CLAIMS])


@pytest.fixture
def live(config: Config, claim_vectors: Any) -> Config:
    """A live-memory cache with CLAIMS, TIMELINE, a roster and history."""
    testing.build_cache(
        config.cache_dir, FLEET, claims=CLAIMS, vectors=claim_vectors, timeline=TIMELINE,
        agents=[
            {"agent_id": "ada", "last_seen_at": ago(minutes=1),
             "leases": [{"path": "src/**", "reason": "refactor", "expires_at": ahead(hours=1)},
                        {"path": "old/**", "reason": "gone", "expires_at": ago(hours=1)}]},
            {"agent_id": "bo", "last_seen_at": ago(minutes=3),
             "leases": [{"path": "src/app.py", "reason": "bugfix", "expires_at": ahead(hours=2)}]},
        ],
        contention=[{"agents": ["ada", "bo"], "paths": ["src/**", "src/app.py"],
                     "expires_at": ahead(hours=1)}],
        sessions=[{"session_id": f"s{i}", "agent_id": "bo", "repo": "web" if i % 2 else "api",
                   "started_at": ago(days=i), "ended_at": ago(days=i, hours=-1),
                   "outcome": "merged", "summary": f"session {i}"} for i in range(1, 61)],
        handoffs=[{"id": "h1", "from_agent": "bo", "status": "blocked", "summary": "waiting",
                   "created_at": ago(hours=2), "source_trust": "agent"}],
        briefing="# Fleet briefing\nada holds src/**\n")
    return config

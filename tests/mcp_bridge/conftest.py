"""Fixtures for the bridge suite: a tmp cache + spool per test, and prebuilt claim sets."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import testing, tools
from mcp_bridge.config import Config

FLEET, AGENT = "fleet-a", "ada"
NOW = dt.datetime.now(dt.UTC)


def ago(**delta: float) -> str:
    return testing.iso(NOW - dt.timedelta(**delta))


def ahead(**delta: float) -> str:
    return testing.iso(NOW + dt.timedelta(**delta))


CLAIMS = [
    testing.claim(
        "cc-01",
        "`cargo test --workspace` needs RUSTFLAGS=-D warnings or the clippy gate fails later.",
        type="gotcha",
        subject="ci",
        confidence=0.81,
        independent_sessions=2,
        contested=True,
        promoted_at="2026-09-09T10:00:00Z",
    ),
    testing.claim(
        "cc-02",
        "Stripe webhooks are retried for three days; handlers must be idempotent.",
        subject="payments",
        independent_sessions=1,
        confidence=0.9,
    ),
    testing.claim(
        "cc-03",
        "Run database migrations before deploying the web workers.",
        type="procedure",
        subject="deploy",
    ),
    testing.claim(
        "cc-04", "The old staging host is staging-1.", subject="deploy", superseded_by="cc-05"
    ),
    testing.claim("cc-05", "The staging host is staging-2 since the move.", subject="deploy"),
    testing.claim(
        "cc-06",
        "The payments sandbox key rotates weekly.",
        subject="payments",
        valid_until=ago(days=1),
    ),
    testing.claim(
        "cc-07",
        "Flaky pytest fixtures in tests/api come from a shared tmp dir.",
        subject="tests",
        stale=True,
        staleness=0.5,
    ),
]
TIMELINE = [
    {
        "subject": "payments",
        "at": ago(days=5),
        "kind": "proposed",
        "claim_id": "cc-02",
        "session_id": "s1",
        "actor": "bo",
        "summary": "proposed: webhooks are retried",
    },
    {
        "subject": "payments",
        "at": ago(days=4),
        "kind": "promoted",
        "claim_id": "cc-02",
        "actor": "mod",
        "summary": "moderator admitted cc-02",
    },
    {
        "subject": "payments",
        "at": ago(days=1),
        "kind": "session",
        "session_id": "s9",
        "actor": "cy",
        "summary": "tried idempotency keys; outcome: merged",
    },
    {
        "subject": "ci",
        "at": ago(days=2),
        "kind": "contested",
        "claim_id": "cc-01",
        "actor": "bo",
        "summary": "contested",
    },
]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config.from_env(
        {
            "CTXLAKE_HOME": str(tmp_path),
            "CTXLAKE_FLEET_ID": FLEET,
            "CTXLAKE_AGENT_ID": AGENT,
            "CTXLAKE_SESSION_ID": "sess-1",
        }
    )


@pytest.fixture
def bridge(config: Config) -> tools.Bridge:
    return tools.Bridge.from_config(config)


@pytest.fixture(scope="session")
def claim_vectors() -> Any:
    from mcp_bridge import embed

    return embed.embed([c["text"] for c in CLAIMS])


@pytest.fixture
def live(config: Config, claim_vectors: Any) -> Config:
    """A live-memory cache with CLAIMS, TIMELINE, a roster and history."""
    testing.build_cache(
        config.cache_dir,
        FLEET,
        claims=CLAIMS,
        vectors=claim_vectors,
        timeline=TIMELINE,
        agents=[
            {
                "agent_id": "ada",
                "last_seen_at": ago(minutes=1),
                "leases": [
                    {"path": "src/**", "reason": "refactor", "expires_at": ahead(hours=1)},
                    {"path": "old/**", "reason": "gone", "expires_at": ago(hours=1)},
                ],
            },
            {
                "agent_id": "bo",
                "last_seen_at": ago(minutes=3),
                "leases": [
                    {"path": "src/app.py", "reason": "bugfix", "expires_at": ahead(hours=2)}
                ],
            },
        ],
        contention=[
            {
                "agents": ["ada", "bo"],
                "paths": ["src/**", "src/app.py"],
                "expires_at": ahead(hours=1),
            }
        ],
        sessions=[
            {
                "session_id": f"s{i}",
                "agent_id": "bo",
                "repo": "web" if i % 2 else "api",
                "started_at": ago(days=i),
                "ended_at": ago(days=i, hours=-1),
                "outcome": "merged",
                "summary": f"session {i}",
            }
            for i in range(1, 61)
        ],
        handoffs=[
            {
                "id": "h1",
                "from_agent": "bo",
                "status": "blocked",
                "summary": "waiting",
                "created_at": ago(hours=2),
                "source_trust": "agent",
            }
        ],
        briefing="# Fleet briefing\nada holds src/**\n",
    )
    return config

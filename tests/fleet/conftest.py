"""REST personas: `api_as(...)` gives a token-authenticated APIClient; `world` is a fleet
with one of each object the API serves, for the permission table."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from claims import moderation
from claims.models import Claim
from fleet import artifacts, handoffs, tokens
from fleet.models import Agent, Fleet, Handoff, Session
from tests.fleet import s3_store

_names = itertools.count(1)
ApiAs = Callable[..., APIClient]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Schemathesis (4.32.5) names each operation's test `test_x[GET /path]`, but pytest 9.2
    builds a test's id from its original name and parametrize's ids alone, so the 38
    operations of tests/fleet/test_api_schema.py shared one id: a report could not say which
    failed, and pytest-xdist, which hands out tests by id, ran one of them. Each gets its
    operation in its id again (the root conftest refuses a run with two tests of one id)."""
    for item in items:
        label = getattr(item, "operation_label", None)  # a SchemathesisFunction's
        if label and item.parent is not None and isinstance(item, pytest.Function):
            item._id = item.parent.id.child(item.originalname).with_params(label)


@pytest.fixture
def api_as(db: None) -> ApiAs:
    """api_as(agent) → an agent-role client for that agent; api_as(fleet, "operator") → …;
    api_as(fleet, "host", relays=[ada, bo]) → a host token relaying for those agents."""

    def make(who: Agent | Fleet, role: str | None = None, relays: Any = ()) -> APIClient:
        agent = who if isinstance(who, Agent) else None
        fleet = who.fleet if isinstance(who, Agent) else who
        role = role or ("agent" if agent else "operator")
        issued = tokens.issue_token(
            fleet, role=role, name=f"{role}-{next(_names)}", agent=agent, relays=relays
        )
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
        client.token = issued.token  # type: ignore[attr-defined]
        client.secret = issued.secret  # type: ignore[attr-defined]
        return client

    return make


def spool_line(fleet: str, agent: str = "ada", **overrides: Any) -> dict[str, Any]:
    event = {
        "v": 1,
        "id": str(uuid.uuid4()),
        "kind": "lease.claim",
        "fleet": fleet,
        "agent": agent,
        "session": "s-1",
        "at": "2026-01-01T00:00:00Z",
        "payload": {"paths": ["src/**"], "reason": "refactor", "ttl_secs": 1800},
    }
    event.update(overrides)
    return event


def ndjson(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


@dataclass
class World:
    fleet: Fleet
    ada: Agent
    session: Session
    handoff: Handoff
    promoted: Claim
    proposed: Claim


CITE = [{"session_id": "s-1", "message_id": "m-1"}]


@pytest.fixture
def world(fleet_a: Fleet, ada: Agent, mod: Any, tmp_path: Path, settings: Any) -> World:
    settings.CTXLAKE_CACHE_DIR = tmp_path / "cache"
    settings.CTXLAKE_SPOOL_DIR = tmp_path / "spool"
    (tmp_path / "cache" / fleet_a.slug).mkdir(parents=True)  # this host's local copy
    (tmp_path / "cache" / fleet_a.slug / "roster.json").write_text('{"agents": []}')
    (tmp_path / "cache" / fleet_a.slug / "manifest.json").write_text('{"format_version": 1}')
    # the same render as the workers store it: what every web host serves
    artifacts.publish(fleet_a, {"roster.json": b'{"agents": []}',
                                "manifest.json": b'{"format_version": 1}'}, at=timezone.now())
    session = Session.objects.create(fleet=fleet_a, agent=ada, session_id="s-1")
    handoff = handoffs.create_handoff(ada, summary="half done", session=session)
    moderation.FleetModerator.objects.create(fleet=fleet_a, user=mod)
    promoted = moderation.propose_claim(
        fleet_a,
        text="pytest -x stops at the first failure",
        type="fact",
        subject="pytest",
        evidence=CITE,
        by_agent=ada,
    ).claim
    moderation.promote_claim(promoted, by=mod)
    proposed = moderation.propose_claim(
        fleet_a,
        text="ruff format is the formatter",
        type="decision",
        subject="style",
        evidence=CITE,
        by_agent=ada,
    ).claim
    return World(fleet_a, ada, session, handoff, promoted, proposed)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[s3_store.S3]:
    """A running store (moto's S3 server over HTTP) with a fresh bucket, configured as the
    settings module would; stopped at the end."""
    server = s3_store.start()
    host, port = server.get_host_and_port()
    found = s3_store.S3(server, f"http://{host}:{port}", f"ctxlake-{uuid.uuid4().hex[:12]}")
    found.client().create_bucket(Bucket=found.bucket)
    s3_store.configure(monkeypatch, settings, found)
    yield found
    server.stop()

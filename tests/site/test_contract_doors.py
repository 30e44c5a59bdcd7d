"""One table of payloads, every front door, the same verdict (mcp_bridge.contract.events).

Doors: the bridge's write tools (argument check + tool), the bridge's Spool writer, the
REST spool upload, the REST write endpoints, and the drain. A payload the bridge would
answer "queued" for is never dead-lettered later, and what one door refuses every door
refuses.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from ctxlake_site import workers
from fleet import tokens
from fleet.models import Agent, AppliedEvent, DeadLetter, Fleet, Session
from mcp_bridge import tools, toolspec
from mcp_bridge.config import Config
from mcp_bridge.contract import events
from mcp_bridge.contract.spool import Refused

CITE = {"session_id": "s1", "message_id": "m1"}
LEASE = {"paths": ["src/a.py"], "reason": "refactor", "ttl_secs": 600}
HANDOFF = {"summary": "half done", "status": "blocked"}
PROPOSAL = {"claim": "make lint needs ruff", "type": "gotcha", "subject": "lint",
            "scope": "agent", "evidence": [CITE]}
NUL, LONE = "a\x00b", "a\ud800b"

CASES: list[tuple[str, str, dict[str, Any]]] = [
    # (label, kind, payload) — valid ones at the limits, then invalid ones
    ("lease at the limits", "lease.claim",
     {**LEASE, "ttl_secs": 86_400, "reason": "r" * 500, "paths": ["p/" + "x" * 1022]}),
    ("lease ttl 60", "lease.claim", {**LEASE, "ttl_secs": 60}),
    ("release all", "lease.release", {"paths": []}),
    ("release some", "lease.release", {"paths": ["src/**"]}),
    ("handoff at the limits", "handoff.create",
     {**HANDOFF, "summary": "s" * 4000, "next": "n" * 2000}),
    ("proposal at the limits", "claim.proposed",
     {**PROPOSAL, "claim": "c" * 2000, "subject": "s" * 200,
      "evidence": [{**CITE, "session_id": "s" * 128, "excerpt": "e" * 2000}] * 20}),
    ("session end", "session.end", {"outcome": "success", "summary": "done",
                                    "changed_paths": ["src/a.py"]}),
    ("captured session end", "session.end",
     {"outcome": "failed", "summary": "s" * 4000, "repo": "r" * 500, "branch": "b" * 255,
      "started_at": "2026-01-01T00:00:00.123456+00:00"}),
    ("ttl 10^30", "lease.claim", {**LEASE, "ttl_secs": 10**30}),
    ("ttl 59", "lease.claim", {**LEASE, "ttl_secs": 59}),
    ("ttl 86401", "lease.claim", {**LEASE, "ttl_secs": 86_401}),
    ("ttl as text", "lease.claim", {**LEASE, "ttl_secs": "600"}),
    ("no paths", "lease.claim", {**LEASE, "paths": []}),
    ("101 paths", "lease.claim", {**LEASE, "paths": [f"p{i}" for i in range(101)]}),
    ("path of 1025", "lease.claim", {**LEASE, "paths": ["x" * 1025]}),
    ("NUL in a path", "lease.claim", {**LEASE, "paths": [NUL]}),
    ("reason of 501", "lease.claim", {**LEASE, "reason": "r" * 501}),
    ("lone surrogate in a reason", "lease.claim", {**LEASE, "reason": LONE}),
    ("release NUL path", "lease.release", {"paths": [NUL]}),
    ("empty summary", "handoff.create", {**HANDOFF, "summary": " "}),
    ("summary of 4001", "handoff.create", {**HANDOFF, "summary": "s" * 4001}),
    ("unknown status", "handoff.create", {**HANDOFF, "status": "stuck"}),
    ("NUL in next", "handoff.create", {**HANDOFF, "next": NUL}),
    ("no evidence", "claim.proposed", {**PROPOSAL, "evidence": []}),
    ("21 citations", "claim.proposed", {**PROPOSAL, "evidence": [CITE] * 21}),
    ("session id of 200", "claim.proposed",
     {**PROPOSAL, "evidence": [{**CITE, "session_id": "s" * 200}]}),
    ("excerpt of 2001", "claim.proposed",
     {**PROPOSAL, "evidence": [{**CITE, "excerpt": "e" * 2001}]}),
    ("unknown citation key", "claim.proposed",
     {**PROPOSAL, "evidence": [{**CITE, "url": "x"}]}),
    ("unknown type", "claim.proposed", {**PROPOSAL, "type": "rumour"}),
    ("subject of 201", "claim.proposed", {**PROPOSAL, "subject": "s" * 201}),
    ("lone surrogate in a claim", "claim.proposed", {**PROPOSAL, "claim": LONE}),
    ("unknown outcome", "session.end", {"outcome": "great"}),
    ("201 changed paths", "session.end", {"changed_paths": [f"p{i}" for i in range(201)]}),
    ("summary of 4001 at the end", "session.end", {"summary": "s" * 4001}),
    ("repo of 501", "session.end", {"repo": "r" * 501}),
    ("branch on two lines", "session.end", {"branch": "main\nx"}),
    ("started_at not a time", "session.end", {"started_at": "yesterday"}),
    ("started_at without a zone", "session.end", {"started_at": "2026-01-01T00:00:00"}),
]
VALID = {label for label, kind, payload in CASES if events.problem(kind, payload) is None}
TOOL = {"lease.claim": "fleet_claim", "lease.release": "fleet_release",
        "handoff.create": "fleet_handoff", "claim.proposed": "memory_propose"}


def test_the_table_has_both_verdicts() -> None:
    assert len(VALID) == 8 and len(CASES) - len(VALID) == 30


def _tool_arguments(payload: dict[str, Any]) -> dict[str, Any]:
    """Tools take the payload's own names; scope and all are the tool's to set."""
    return {k: v for k, v in payload.items() if k not in ("scope", "all")}


def _bridge_door(tmp_path: Path, kind: str, payload: dict[str, Any]) -> bool:
    """True when the bridge queues it (tool for the four tools, the writer for session.end)."""
    cfg = Config.from_env({"CTXLAKE_HOME": str(tmp_path / "bridge"), "CTXLAKE_FLEET_ID": "fleet-a",
                           "CTXLAKE_AGENT_ID": "ada", "CTXLAKE_SESSION_ID": "s1"})
    bridge = tools.Bridge.from_config(cfg)
    try:
        if kind in TOOL:
            args = toolspec.check_arguments(TOOL[kind], _tool_arguments(payload))
            tools.HANDLERS[TOOL[kind]](bridge, **args)
        else:
            bridge.spool.append(kind, payload)
    except (toolspec.BadArguments, tools.Rejected, Refused):
        return False
    return True


def _line(kind: str, payload: dict[str, Any]) -> bytes:
    event = {"v": 1, "id": str(uuid.uuid4()), "kind": kind, "fleet": "fleet-a", "agent": "ada",
             "session": "s1", "at": "2026-01-01T00:00:00Z", "payload": payload}
    return json.dumps(event).encode() + b"\n"


def _rest_spool_door(client: APIClient, kind: str, payload: dict[str, Any]) -> bool:
    response = client.post("/api/v1/fleets/fleet-a/spool", _line(kind, payload),
                           content_type="application/x-ndjson")
    assert response.status_code in (200, 400), response.content[:300]
    return bool(response.json()["accepted"])


def _rest_write_door(client: APIClient, kind: str, payload: dict[str, Any]) -> bool | None:
    """True/False for the REST endpoint making the same change; None where it has none."""
    base = "/api/v1/fleets/fleet-a"
    body = {k: v for k, v in payload.items() if k not in ("scope", "all")}
    if kind == "lease.claim":
        url = f"{base}/leases/claim"
    elif kind == "lease.release":
        url = f"{base}/leases/release"
    elif kind == "handoff.create":
        url = f"{base}/handoffs"
        if "next" in body:
            body["next_steps"] = body.pop("next")
    elif kind == "claim.proposed":
        url = f"{base}/claims"
        body["text"] = body.pop("claim")
    else:
        url = f"{base}/sessions/s1/end"
    response = client.post(url, json.dumps(body), content_type="application/json")
    assert response.status_code in (200, 201, 400), (url, response.content[:300])
    return response.status_code != 400


def _drain_door(spool_dir: Path, kind: str, payload: dict[str, Any]) -> bool:
    path = spool_dir / "mcp" / "fleet-a.ndjson"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(_line(kind, payload))
    before = DeadLetter.objects.count()
    workers.drain_spool("fleet-a")
    return DeadLetter.objects.count() == before


@pytest.mark.parametrize(("label", "kind", "payload"), CASES, ids=[c[0] for c in CASES])
def test_every_door_gives_the_same_verdict(
    label: str, kind: str, payload: dict[str, Any], fleet_a: Fleet, ada: Agent, tmp_path: Path,
    spool_dir: Path, settings: Any,
) -> None:
    settings.CTXLAKE_SPOOL_DIR = tmp_path / "rest-spool"
    Session.objects.create(fleet=fleet_a, agent=ada, session_id="s1")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + tokens.issue_token(
        fleet_a, role="agent", name="ada", agent=ada).secret)
    expected = label in VALID
    verdicts = {
        "bridge": _bridge_door(tmp_path, kind, payload),
        "rest spool": _rest_spool_door(client, kind, payload),
        "rest write": _rest_write_door(client, kind, payload),
        "drain": _drain_door(spool_dir, kind, payload),
    }
    problem = events.problem(kind, payload)
    assert verdicts == {door: expected for door in verdicts}, (verdicts, problem)
    if expected:
        assert AppliedEvent.objects.filter(fleet=fleet_a, kind=kind).exists()

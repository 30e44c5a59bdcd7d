"""lease.intrusion, the PreToolUse hook's spool kind, against hostile lines: the bridge's
writer refuses each (nothing queued), the drain dead-letters each raw line with a reason
and applies the good ones around it, and the REST spool upload refuses each (400)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from ctxlake_site import workers
from fleet import tokens
from fleet.models import Agent, DeadLetter, Fleet, InboxEvent, Incident
from mcp_bridge.contract import events
from mcp_bridge.contract.spool import Refused, Spool

GOOD = {"paths": ["src/payments/api.py"], "holder": "bo", "tool": "edit"}
NUL, LONE = "a\u0000b", "a\ud800b"
CONTRACT_BREAKERS: list[tuple[str, Any]] = [
    ("NUL in a path", {**GOOD, "paths": [NUL]}),
    ("lone surrogate in a path", {**GOOD, "paths": [LONE]}),
    ("NUL in the holder", {**GOOD, "holder": NUL}),
    ("lone surrogate in the holder", {**GOOD, "holder": LONE}),
    ("a newline in the holder", {**GOOD, "holder": "bo\nada"}),
    ("a 2,000-character path", {**GOOD, "paths": ["x" * 2000]}),
    ("21 paths", {**GOOD, "paths": [f"src/{i}.py" for i in range(21)]}),
    ("a 200-character holder", {**GOOD, "holder": "b" * 200}),
    ("a 1 MB holder", {**GOOD, "holder": "b" * (1 << 20)}),
    ("no paths", {**GOOD, "paths": []}),
    ("paths as a string", {**GOOD, "paths": "src/x.py"}),
    ("paths of numbers", {**GOOD, "paths": [7]}),
    ("the holder as a number", {**GOOD, "holder": 7}),
    ("the holder as a list", {**GOOD, "holder": ["bo"]}),
    ("no holder", {"paths": ["a.py"], "tool": "edit"}),
    ("an unknown tool", {**GOOD, "tool": "rm -rf"}),
    ("the tool as a bool", {**GOOD, "tool": True}),
    ("an unknown key", {**GOOD, "owner": "root"}),
    ("a payload that is a list", [GOOD]),
]
#: Well-formed by the contract, refused by the drain only (it knows the fleet's agents).
DRAIN_ONLY = [
    ("a holder the fleet does not have", {**GOOD, "holder": "nobody"}),
    ("the actor as its own holder", {**GOOD, "holder": "ada"}),
    ("a path that climbs out of the repo", {**GOOD, "paths": ["../etc/passwd"]}),
]


def _line(fleet: str, payload: Any) -> bytes:
    event = {"v": 1, "id": str(uuid.uuid4()), "kind": events.KIND_LEASE_INTRUSION,
             "fleet": fleet, "agent": "ada", "session": "s1", "at": "2026-01-01T00:00:00Z",
             "payload": payload}
    return json.dumps(event).encode()


@pytest.mark.parametrize(("name", "payload"), CONTRACT_BREAKERS, ids=[n for n, _ in
                                                                       CONTRACT_BREAKERS])
def test_the_bridges_writer_refuses_each_and_queues_nothing(
    name: str, payload: Any, tmp_path: Path,
) -> None:
    assert events.problem(events.KIND_LEASE_INTRUSION, payload)
    spool = Spool(tmp_path, fleet="fleet-a", agent="ada", session="s1")
    with pytest.raises(Refused):
        spool.append(events.KIND_LEASE_INTRUSION, payload)
    assert not spool.path.exists()


def test_every_hostile_line_is_one_dead_letter_and_the_good_ones_are_applied(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path, spool_for: Callable[..., Spool],
) -> None:
    good = spool_for(fleet_a.slug, "ada", session="s1")
    hostile = [*CONTRACT_BREAKERS, *DRAIN_ONLY]
    good.append(events.KIND_LEASE_INTRUSION, GOOD)
    for _, payload in hostile:
        with open(good.path, "ab") as f:
            f.write(_line(fleet_a.slug, payload) + b"\n")
    good.append(events.KIND_LEASE_INTRUSION, {**GOOD, "paths": ["docs/x.md"], "tool": "commit"})

    report = workers.drain_spool()

    assert (report.applied, report.dead) == (2, len(hostile))
    assert sorted(Incident.objects.values_list("kind", flat=True)) == [
        "commit_in_lease", "edit_in_lease"]
    reasons = " | ".join(DeadLetter.objects.values_list("reason", flat=True))
    for expected in ("NUL", "lone surrogate", "printable", "limit is", "unknown field",
                     "tool must be one of", "no agent 'nobody'", "its own lease"):
        assert expected in reasons, expected


@pytest.mark.parametrize(("name", "payload"), CONTRACT_BREAKERS[:8],
                         ids=[n for n, _ in CONTRACT_BREAKERS[:8]])
def test_the_rest_spool_upload_refuses_them(
    name: str, payload: Any, fleet_a: Fleet, spool_dir: Path, settings: Any,
) -> None:
    settings.CTXLAKE_SPOOL_DIR = spool_dir
    issued = tokens.issue_token(fleet_a, role="operator", name="host")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    answer = client.post(f"/api/v1/fleets/{fleet_a.slug}/spool",
                         _line(fleet_a.slug, payload) + b"\n",
                         content_type="application/x-ndjson")
    assert answer.status_code == 400 and answer.json()["rejected"][0]["reason"]
    assert not (spool_dir / "mcp" / f"{fleet_a.slug}.ndjson").exists()
    assert not InboxEvent.objects.exists()  # nor in the server's inbox


TOLD_BREAKERS: list[Any] = [
    {}, {"incidents": []}, {"incidents": "i-1"}, {"incidents": [1]}, {"incidents": ["i-0"]},
    {"incidents": ["i-01"]}, {"incidents": ["i-1\u0000"]}, {"incidents": ["i-\ud800"]},
    {"incidents": ["i-1", "i-1"]}, {"incidents": [f"i-{n}" for n in range(1, 52)]},
    {"incidents": ["i-" + "9" * 30]}, {"incidents": ["i-1"], "told_at": "now"},
]


@pytest.mark.parametrize("payload", TOLD_BREAKERS)
def test_incident_told_refuses_anything_but_a_list_of_incident_ids(payload: Any) -> None:
    assert events.problem(events.KIND_INCIDENT_TOLD, payload)


def test_incident_told_marks_only_the_senders_own_incidents(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_for: Callable[..., Spool],
) -> None:
    from fleet import incidents

    mine = incidents.record_incident(fleet_a, "edit_in_lease", actor=ada, holder=bo)
    theirs = incidents.record_incident(fleet_a, "edit_in_lease", actor=bo, holder=ada)
    spool_for(fleet_a.slug, "bo", session="s1").append(
        events.KIND_INCIDENT_TOLD, {"incidents": [f"i-{mine.pk}", f"i-{theirs.pk}", "i-999999"]})
    workers.drain_spool()
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.told_at is not None and theirs.told_at is None

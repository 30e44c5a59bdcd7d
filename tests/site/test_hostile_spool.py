"""Thirty hostile spool lines: each is one dead letter with a reason, nothing stops the drain.

The same lines posted to the REST spool upload are refused (400) and never written.
Valid lines around them come from the bridge's own Spool writer.
"""

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
from fleet.models import Agent, AppliedEvent, DeadLetter, Fleet, InboxEvent
from mcp_bridge.contract.spool import Spool

CITE = {"session_id": "s1", "message_id": "m1"}
GOOD_CLAIM = {"paths": ["src/ok.py"], "reason": "r", "ttl_secs": 600}


def _line(fleet: str, kind: str = "lease.claim", payload: Any = None, **over: Any) -> bytes:
    event = {"v": 1, "id": str(uuid.uuid4()), "kind": kind, "fleet": fleet, "agent": "ada",
             "session": "s1", "at": "2026-01-01T00:00:00Z",
             "payload": GOOD_CLAIM if payload is None else payload, **over}
    return json.dumps(event).encode()


def _raw(fleet: str, payload_json: str, kind: str = "lease.claim") -> bytes:
    """A line whose payload is given as raw JSON text (for what json.dumps cannot write)."""
    head = _line(fleet, kind, payload={})[:-len(b'"payload": {}}')]
    return head + b'"payload": ' + payload_json.encode() + b"}"


def hostile(fleet: str) -> list[tuple[str, bytes]]:
    nul, lone = "a\u0000b", "a\ud800b"
    handoff = {"summary": "s", "status": "blocked"}
    prop = {"claim": "c", "type": "fact", "subject": "s", "evidence": [CITE]}
    return [
        ("NUL in a handoff summary", _line(fleet, "handoff.create", {**handoff, "summary": nul})),
        ("lone surrogate in a handoff summary",
         _line(fleet, "handoff.create", {**handoff, "summary": lone})),
        ("NUL in next steps", _line(fleet, "handoff.create", {**handoff, "next": nul})),
        ("lone surrogate in next steps", _line(fleet, "handoff.create", {**handoff, "next": lone})),
        ("NUL in claim text", _line(fleet, "claim.proposed", {**prop, "claim": nul})),
        ("lone surrogate in claim text", _line(fleet, "claim.proposed", {**prop, "claim": lone})),
        ("NUL in a subject", _line(fleet, "claim.proposed", {**prop, "subject": nul})),
        ("NUL in an excerpt",
         _line(fleet, "claim.proposed", {**prop, "evidence": [{**CITE, "excerpt": nul}]})),
        ("lone surrogate in a citation's session",
         _line(fleet, "claim.proposed", {**prop, "evidence": [{**CITE, "session_id": lone}]})),
        ("NUL in a lease path", _line(fleet, payload={**GOOD_CLAIM, "paths": [nul]})),
        ("lone surrogate in a lease path", _line(fleet, payload={**GOOD_CLAIM, "paths": [lone]})),
        ("NUL in a lease reason", _line(fleet, payload={**GOOD_CLAIM, "reason": nul})),
        ("NUL in a session summary", _line(fleet, "session.end", {"summary": nul})),
        ("lone surrogate in a changed path",
         _line(fleet, "session.end", {"changed_paths": [lone]})),
        ("JSON nested 10,000 deep", _raw(fleet, "[" * 10_000 + "]" * 10_000)),
        ("ttl_secs of 10^30", _line(fleet, payload={**GOOD_CLAIM, "ttl_secs": 10**30})),
        ("ttl_secs of 5,000 digits",
         _raw(fleet, '{"paths": ["a"], "ttl_secs": ' + "9" * 5000 + "}")),
        ("ttl_secs as a float", _line(fleet, payload={**GOOD_CLAIM, "ttl_secs": 1e300})),
        ("ttl_secs NaN", _raw(fleet, '{"paths": ["a"], "ttl_secs": NaN}')),
        ("paths as a string", _line(fleet, payload={**GOOD_CLAIM, "paths": "src/x.py"})),
        ("evidence as an object", _line(fleet, "claim.proposed", {**prop, "evidence": CITE})),
        ("summary as a number", _line(fleet, "handoff.create", {**handoff, "summary": 7})),
        ("an unknown kind", _line(fleet, "lease.steal")),
        ("an unknown payload field", _line(fleet, payload={**GOOD_CLAIM, "owner": "root"})),
        ("a torn fragment", b'{"v": 1, "id": "'),
        ("invalid UTF-8", _line(fleet)[:-2] + b'\xff\xfe"}'),
        ("not an object", b"[1, 2, 3]"),
        ("a wrong fleet", _line("some-other-fleet")),
        ("an agent with a NUL", _line(fleet, agent="ad\u0000a")),
        ("a NUL ending the time", _line(fleet, at="2026-01-01T00:00:00Z\u0000")),
        ("a NUL as the time's separator", _line(fleet, at="2026-01-01\u000000:00:00")),
        ("11 MB of one string", _line(fleet, "handoff.create",
                                      {**handoff, "summary": "x" * (11 << 20)})),
    ]


def _good(spool_for: Callable[..., Spool], fleet: str, n: int) -> None:
    spool_for(fleet, "ada", session="s1").append(
        "lease.claim", {"paths": [f"src/{n}.py"], "reason": "r", "ttl_secs": 600})


def _write_raw(spool_dir: Path, fleet: str, line: bytes) -> None:
    path = spool_dir / "mcp" / f"{fleet}.ndjson"
    with open(path, "ab") as f:
        f.write(line + b"\n")


def test_every_hostile_line_is_one_dead_letter_and_the_rest_are_applied(
    fleet_a: Fleet, fleet_b: Fleet, spool_dir: Path, spool_for: Callable[..., Spool]
) -> None:
    lines = hostile(fleet_a.slug)
    assert len(lines) == 32
    for n, (_, raw) in enumerate(lines):
        _good(spool_for, fleet_a.slug, n)
        _write_raw(spool_dir, fleet_a.slug, raw)
    _good(spool_for, fleet_a.slug, 99)
    _good(spool_for, fleet_b.slug, 0)  # "fleet-b" sorts after the poisoned fleet

    report = workers.drain_spool()

    assert report.failed_fleets == {}
    assert (report.applied, report.dead) == (34, 32)
    assert AppliedEvent.objects.filter(fleet=fleet_b).count() == 1
    letters = list(DeadLetter.objects.filter(fleet=fleet_a).order_by("offset"))
    assert len(letters) == 32 and len({d.offset for d in letters}) == 32
    assert all(d.reason for d in letters)
    reasons = " | ".join(d.reason for d in letters)
    for expected in ("NUL", "lone surrogate", "nested deeper than 100", "ttl_secs must be from",
                     "unknown kind", "unknown field", "not JSON", "does not match"):
        assert expected in reasons
    dead_file = spool_dir / "dead" / f"{fleet_a.slug}.ndjson"
    assert len(dead_file.read_text().splitlines()) == 32

    again = workers.drain_spool()  # recorded once: a second pass adds nothing
    assert (again.applied, again.dead) == (0, 0)
    assert DeadLetter.objects.count() == 32
    assert len(dead_file.read_text().splitlines()) == 32


@pytest.mark.parametrize("role", ["operator", "host"])
@pytest.mark.parametrize("name", [name for name, _ in hostile("fleet-a")])
def test_the_rest_spool_upload_refuses_each_hostile_line(
    name: str, role: str, fleet_a: Fleet, spool_dir: Path, settings: Any
) -> None:
    """Whatever the token: an operator's, or a host token relaying for ada (the lines'
    agent), so each line reaches the contract's check and is refused by it."""
    settings.CTXLAKE_SPOOL_DIR = spool_dir
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 16 << 20  # so the 11 MB line reaches the contract
    raw = dict(hostile(fleet_a.slug))[name]
    ada = Agent.objects.create(fleet=fleet_a, agent_id="ada")
    issued = tokens.issue_token(fleet_a, role=role, name="host",
                                relays=[ada] if role == "host" else [])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    response = client.post(f"/api/v1/fleets/{fleet_a.slug}/spool", raw + b"\n",
                           content_type="application/x-ndjson")
    assert response.status_code == 400, response.content[:300]
    (rejected,) = response.json()["rejected"]
    assert rejected["reason"]
    assert not (spool_dir / "mcp" / f"{fleet_a.slug}.ndjson").exists()
    assert not InboxEvent.objects.exists()  # nor in the server's inbox

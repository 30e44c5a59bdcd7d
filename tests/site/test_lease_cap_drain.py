"""The per-agent cap on live leases at the spool front doors: a real bridge process's
fleet_claim and a remote spool upload, both applied by the drain, which records the
refusal as the event's result (not a dead letter); the agent reads it in fleet_status.
And the batched drain still leaves what one-by-one leaves when the cap refuses claims.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from ctxlake_site import drain, workers
from fleet import leases, tokens
from fleet.models import AppliedEvent, Fleet, Lease
from tests.site.test_drain_batched import _dead_reasons, _seen, _stream, _write
from tests.site.test_end_to_end import BridgeProcess


@pytest.fixture
def cap2(settings: Any) -> int:
    settings.CTXLAKE_MAX_LIVE_LEASES_PER_AGENT = 2
    return 2


@pytest.fixture
def bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fleet_a: Fleet
) -> Iterator[BridgeProcess]:
    cache, spool = tmp_path / "cache", tmp_path / "spool"
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(cache))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(spool))
    proc = BridgeProcess({
        **os.environ, "CTXLAKE_FLEET_ID": fleet_a.slug, "CTXLAKE_AGENT_ID": "ada",
        "CTXLAKE_SESSION_ID": "s-cap", "CTXLAKE_CACHE_DIR": str(cache),
        "CTXLAKE_SPOOL_DIR": str(spool),
    })
    proc.request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                                "clientInfo": {"name": "cap", "version": "1"}})
    proc.notify("notifications/initialized")
    yield proc
    proc.close()


def _held(fleet: Fleet) -> list[str]:
    return sorted(Lease.objects.active().filter(fleet=fleet).values_list("path", flat=True))


@pytest.mark.slow
def test_a_bridge_claim_past_the_cap_is_applied_as_a_refusal_the_agent_can_read(
    cap2: int, bridge: BridgeProcess, fleet_a: Fleet
) -> None:
    assert bridge.tool("fleet_claim", paths=["src/a.py"], reason="one")["status"] == (
        "queued for sync"
    )
    bridge.tool("fleet_claim", paths=["src/b.py", "src/c.py"], reason="too many")
    report = workers.drain_spool()
    assert (report.applied, report.dead) == (2, 0)  # a refusal is applied, not dead-lettered
    results = sorted(
        (e.result for e in AppliedEvent.objects.filter(fleet=fleet_a)),
        key=lambda r: "refused" in r,
    )
    assert results[0]["held"] == ["src/a.py"]
    assert results[1]["held"] == [] and results[1]["cap"] == 2
    assert "past the cap of 2 per agent" in results[1]["refused"]
    assert _held(fleet_a) == ["src/a.py"]
    workers.render_fleet(fleet_a)
    status = bridge.tool("fleet_status")
    (ada,) = status["agents"]
    assert [lease["path"] for lease in ada["leases"]] == ["src/a.py"]
    (refusal,) = ada["refused_claims"]
    assert refusal["paths"] == ["src/b.py", "src/c.py"]
    assert "the cap is 2 per agent" in refusal["reason"]


def test_a_spool_upload_past_the_cap_is_applied_as_a_refusal(
    cap2: int, fleet_a: Fleet, spool_dir: Path, settings: Any
) -> None:
    settings.CTXLAKE_SPOOL_DIR = spool_dir  # where the upload relays to; the drain reads it
    client = APIClient()
    secret = tokens.issue_token(fleet_a, role="operator", name="uploader").secret
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    at = timezone.now().isoformat().replace("+00:00", "Z")
    lines = [
        {"v": 1, "id": str(uuid.uuid4()), "kind": "lease.claim", "fleet": fleet_a.slug,
         "agent": "remote", "session": None, "at": at,
         "payload": {"paths": paths, "reason": "r", "ttl_secs": 600}}
        for paths in (["x/1.py", "x/2.py"], ["x/3.py"])
    ]
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    answer = client.post(f"/api/v1/fleets/{fleet_a.slug}/spool", data=body,
                         content_type="application/x-ndjson")
    assert answer.status_code == 200 and len(answer.json()["accepted"]) == 2
    report = workers.drain_spool()
    assert (report.applied, report.dead) == (2, 0)
    refused = AppliedEvent.objects.get(event_id=lines[1]["id"]).result
    assert refused["held"] == [] and "remote holds 2 live lease(s)" in refused["refused"]
    assert _held(fleet_a) == ["x/1.py", "x/2.py"]


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_drain_leaves_what_one_by_one_leaves_when_the_cap_refuses(
    seed: int, cap2: int, db: None, spool_dir: Path
) -> None:
    events = _stream(seed, 300)
    fleets = {
        mode: Fleet.objects.create(slug=f"cap-{mode}-{seed}", name=mode, memory_mode="live")
        for mode in ("batched", "single")
    }
    ids = {mode: _write(spool_dir, fleet, events) for mode, fleet in fleets.items()}
    batched = drain.Drainer(spool_dir, workers.APPLIERS, batch_appliers=workers.BATCH_APPLIERS)
    single = drain.Drainer(spool_dir, workers.APPLIERS)
    assert (
        batched.run(only_fleet=fleets["batched"].slug).applied
        == single.run(only_fleet=fleets["single"].slug).applied
    )
    seen = {mode: _seen(fleet, ids[mode]) for mode, fleet in fleets.items()}
    for key in seen["single"]:
        assert seen["batched"][key] == seen["single"][key], key
    assert _dead_reasons(spool_dir, fleets["batched"]) == _dead_reasons(
        spool_dir, fleets["single"]
    )
    results = seen["single"]["results"]
    refusals = [r for r in results if r and r.get("refused")]
    assert len(refusals) > 5  # the cap really refused claims in this stream
    assert any(r and r.get("held") for r in results)
    assert any(leases.REFUSED in key for key in seen["single"]["activity"])

"""The briefing's path-scoped memory: claims about the paths leased in the fleet now."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from claims import snapshot_render
from claims.models import Claim
from ctxlake_site import workers
from fleet import leases
from fleet.models import Agent, Fleet
from mcp_bridge import contract
from tests.claims.searchdata import promoted

ROWS = [
    {
        "text": "Refunds round to the cent before the Stripe call.",
        "subject": "payments",
        "paths": ["src/payments/refunds.py"],
        "confidence": 0.9,
    },
    {"text": "Webhook handlers must be idempotent.", "subject": "payments", "confidence": 0.6},
    {
        "text": "The old refund path is gone.",
        "subject": "payments",
        "paths": ["src/payments/legacy.py"],
    },
    {"text": "The frontend builds with pnpm.", "subject": "frontend", "paths": ["web/pkg.json"]},
]


def test_path_claims_rank_cited_paths_before_subjects_and_skip_superseded(
    fleet_a: Fleet,
) -> None:
    refunds, webhooks, legacy, _ = promoted(fleet_a, ROWS)
    Claim.objects.filter(pk=legacy.pk).update(superseded_by=refunds)
    found = snapshot_render.path_claims(fleet_a, ["src/payments/**"], now=timezone.now())
    assert [c["id"] for c in found] == [refunds.public_id, webhooks.public_id]
    assert snapshot_render.path_claims(fleet_a, [], now=timezone.now()) == []


def test_path_claims_about_paths_no_claim_is_about_read_nothing_more(fleet_a: Fleet) -> None:
    """The usual answer in a render (leases on paths no claim cites or names): the
    subjects and citations are read, and neither the claims' rows nor their open
    contradictions are (they were, in every render)."""
    promoted(fleet_a, ROWS)
    with CaptureQueriesContext(connection) as run:
        found = snapshot_render.path_claims(fleet_a, ["docs/**"], now=timezone.now())
    assert found == []
    assert len(run.captured_queries) == 2
    assert not any("claims_contradiction" in q["sql"] for q in run.captured_queries)


def test_the_briefing_shows_memory_for_the_leased_paths(
    fleet_a: Fleet, ada: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path))
    refunds, *_ = promoted(fleet_a, ROWS)
    Claim.objects.filter(pk=refunds.pk).update(staleness=0.5)
    leases.claim_paths(ada, ["src/payments/**"], ttl=timedelta(hours=1))
    workers.render_fleet(fleet_a)
    text = (tmp_path / fleet_a.slug / contract.BRIEFING).read_text()
    section = text.split("## Shared memory about the paths leased now")[1].split("## ")[0]
    assert f"[{refunds.public_id}, " in section and "POSSIBLY STALE" in section
    assert "pnpm" not in section
    assert text.count(f"[{refunds.public_id}, ") == 1  # not repeated in the general section

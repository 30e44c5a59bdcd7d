"""Index bloat after bulk deletes: found, reported by doctor, rebuilt by maintain_db.

Real Postgres and pgvector; the size floor is lowered so that a few hundred rows make a
measurable index (the rule — size against rows × a fresh build's bytes per row — is the
shipped one). transactional_db: VACUUM and REINDEX CONCURRENTLY refuse a transaction.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from claims import embeddings, search
from claims.models import Claim
from ctxlake_site import db_health, workers
from fleet.models import Fleet
from mcp_bridge.contract import embed

HNSW = "claims_claim_embedding_hnsw"


def _fill(fleet: Fleet, n: int) -> None:
    vectors = np.random.default_rng(3).normal(size=(n, embed.DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = timezone.now()
    Claim.objects.bulk_create(
        Claim(fleet=fleet, number=i + 1, text=f"claim {i} about the build step {i % 7}",
              type="fact", subject="build", scope="fleet", status="promoted", promoted_at=now,
              independent_sessions=1, text_hash="0" * 64, embedding=vectors[i],
              embedding_model=embed.NAME)
        for i in range(n)
    )


def _hnsw() -> db_health.IndexHealth:
    return next(h for h in db_health.index_report() if h.name == HNSW)


@pytest.fixture
def small_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_health, "BLOAT_FLOOR_BYTES", 64 << 10)


def test_a_bulk_delete_leaves_the_vector_index_bloated_until_maintain_db_rebuilds_it(
    transactional_db: None, small_floor: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with connection.cursor() as cur:  # earlier tests' deleted rows would bloat them already
        for watched in db_health.index_report():  # every one doctor_status judges, not HNSW
            cur.execute(f"REINDEX INDEX {connection.ops.quote_name(watched.name)}")
    keep = Fleet.objects.create(slug="keep", name="keep", memory_mode="live")
    gone = Fleet.objects.create(slug="gone", name="gone", memory_mode="live")
    _fill(keep, 40)
    _fill(gone, 600)
    healthy = _hnsw()
    assert (healthy.rows, healthy.bloated) == (640, False)
    assert db_health.doctor_status()[0] == "ok"

    gone.delete()
    db_health.vacuum()
    bloated = _hnsw()
    assert bloated.rows == 40 and bloated.size >= healthy.size  # HNSW gives nothing back
    assert bloated.bloated
    status, detail = db_health.doctor_status()
    assert status == "warn" and HNSW in detail and "maintain_db --commit" in detail

    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    out = StringIO()
    call_command("doctor", "--json", stdout=out)
    checks = {c["name"]: c for c in json.loads(out.getvalue())}
    assert checks["index bloat"]["status"] == "warn"

    dry = StringIO()
    call_command("maintain_db", stdout=dry)
    assert f"would run: REINDEX INDEX CONCURRENTLY {HNSW}" in dry.getvalue()
    assert "would run: VACUUM (ANALYZE) claims_claim" in dry.getvalue()
    assert _hnsw().size == bloated.size  # a dry run changes nothing

    done = StringIO()
    call_command("maintain_db", "--commit", stdout=done)
    assert f"done: REINDEX INDEX CONCURRENTLY {HNSW}" in done.getvalue()
    rebuilt = _hnsw()
    assert rebuilt.rows == 40 and rebuilt.size < bloated.size / 4 and not rebuilt.bloated
    assert db_health.doctor_status()[0] == "ok"
    # the rebuilt index still answers: a stored vector's nearest neighbour is its own claim
    probe = Claim.objects.filter(fleet=keep).order_by("number")[7]
    with embeddings.hnsw_scan(5):
        nearest = list(search.vector_query(Claim.objects.filter(fleet=keep), probe.embedding)[:5])
    assert len(nearest) == 5 and nearest[0][0] == probe.pk


def test_the_daily_job_is_scheduled_and_reports_what_it_did(
    transactional_db: None, small_floor: None
) -> None:
    assert any(s["func"] == "ctxlake_site.workers.maintain_db_task" for s in workers.SCHEDULES)
    workers.ensure_schedules()
    from django_q.models import Schedule

    assert Schedule.objects.get(name="ctxlake.maintain_db").schedule_type == "D"
    summary = workers.maintain_db_task()
    assert summary.startswith(f"vacuumed {len(db_health.tables())} table(s)")


def test_maintenance_covers_the_tables_bulk_deletes_touch() -> None:
    names: Any = db_health.tables()
    assert {"claims_claim", "fleet_lease", "fleet_activity", "django_q_ormq"} <= set(names)

"""Delta sync against a live test server: the snapshot follows renders by deltas, in place.

The server renders from the test database (real claims, real vectors) and stores each
render's delta (fleet.artifacts.record_snapshot); the host pulls with mcp_bridge.sync. After
a delta the host's snapshot must answer exactly as a fresh full download of the same render
does, and every reason not to trust a delta must end in a full download.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from claims.models import Claim
from ctxlake_site import workers
from fleet import artifacts, tokens
from fleet.models import Agent, Fleet, SnapshotDelta
from mcp_bridge import contract, sync
from mcp_bridge.contract import delta, embed
from mcp_bridge.snapshot import Snapshot
from mcp_bridge.testing import snapshot_rows

QUERIES = ("widgets retry", "database migration", "flaky pytest cache", "deploy")


def _vector(seed: int) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(embed.DIMS)
    return list(v / np.linalg.norm(v))


def _claims(fleet: Fleet, numbers: range) -> None:
    words = ("widgets retry", "database migration", "flaky pytest cache", "deploy rollback")
    Claim.objects.bulk_create(
        Claim(
            fleet=fleet,
            number=n,
            text=f"claim {n}: {words[n % 4]} needs care {n % 7}",
            type="fact",
            subject=("ci", "db", "tests")[n % 3],
            scope="fleet",
            status="promoted",
            promoted_at=timezone.now(),
            independent_sessions=1 + n % 3,
            confidence=0.5 + (n % 5) / 10,
            text_hash=f"{n:064d}",
            embedding=_vector(n),
            embedding_model=embed.NAME,
        )
        for n in numbers
    )


@pytest.fixture
def server(
    transactional_db: None,
    live_server: Any,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    fleet_a: Fleet,
    ada: Agent,
) -> sync.Remote:
    settings.CTXLAKE_LOCAL_CACHE = False  # what the server serves is the database's render
    settings.CTXLAKE_CACHE_DIR = tmp_path / "server-cache"
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "server-cache"))
    _claims(fleet_a, range(1, 301))
    workers.render_fleet(fleet_a)
    issued = tokens.issue_token(fleet_a, role="agent", name="host-1", agent=ada)
    return sync.Remote(live_server.url, fleet_a.slug, issued.secret, timeout=10)


def _change(fleet: Fleet) -> None:
    """~3 % of the claims: edited, retired (retracted), added."""
    Claim.objects.filter(fleet=fleet, number__in=[5, 6, 7]).update(text="widgets retry edited")
    Claim.objects.filter(fleet=fleet, number=8).update(embedding=_vector(999))
    Claim.objects.filter(fleet=fleet, number__in=[10, 11]).update(status="retracted")
    _claims(fleet, range(301, 305))
    workers.render_fleet(fleet)


def _snapshot(cache: Path, fleet: str) -> Path:
    return cache / fleet / contract.SNAPSHOT


def _answers(path: Path, fleet: str) -> list[Any]:
    snap = Snapshot(path, fleet=fleet)
    try:
        vector = np.asarray(_vector(5), dtype=np.float32)
        return [snap.search(q, k=10, query_vector=vector).results for q in QUERIES] + [
            snap.timeline("ci", since=None, limit=50)[0]
        ]
    finally:
        snap.close()


def test_first_sync_is_full_then_a_delta_that_searches_like_a_full_download(
    server: sync.Remote, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    first = sync.pull(server, host)
    assert contract.SNAPSHOT in first.changed and not first.delta
    _change(Fleet.objects.get(slug=server.fleet))
    second = sync.pull(server, host)
    assert second.delta and contract.SNAPSHOT in second.changed and not second.notes
    fresh = sync.pull(server, tmp_path / "fresh")
    assert not fresh.delta
    full_size = _snapshot(tmp_path / "fresh", server.fleet).stat().st_size
    assert second.fetched_bytes < full_size / 20, (second.fetched_bytes, full_size)
    mine, theirs = _snapshot(host, server.fleet), _snapshot(tmp_path / "fresh", server.fleet)
    assert snapshot_rows(mine) == snapshot_rows(theirs)
    assert _answers(mine, server.fleet) == _answers(theirs, server.fleet)
    assert sync.pull(server, host).unchanged  # and then nothing to fetch


def test_by_delta_false_downloads_the_changed_snapshot_whole(
    server: sync.Remote, tmp_path: Path
) -> None:
    """`sync --no-delta`: what bench/fleet_scale.py compares delta sync with."""
    host = tmp_path / "host"
    sync.pull(server, host)
    _change(Fleet.objects.get(slug=server.fleet))
    whole = sync.pull(server, host, by_delta=False)
    assert contract.SNAPSHOT in whole.changed and not whole.delta
    size = _snapshot(host, server.fleet).stat().st_size
    assert whole.fetched_bytes >= size
    assert f"({whole.fetched_bytes} bytes fetched)" in sync._summary(sync.PushReport(), whole)
    fresh = tmp_path / "fresh"
    sync.pull(server, fresh)
    assert snapshot_rows(_snapshot(host, server.fleet)) == snapshot_rows(
        _snapshot(fresh, server.fleet))


def test_a_host_several_renders_behind_gets_one_merged_delta(
    server: sync.Remote, tmp_path: Path
) -> None:
    sync.pull(server, tmp_path / "host")
    fleet = Fleet.objects.get(slug=server.fleet)
    _change(fleet)
    Claim.objects.filter(fleet=fleet, number=5).update(text="edited again")
    workers.render_fleet(fleet)
    report = sync.pull(server, tmp_path / "host")
    assert report.delta
    sync.pull(server, tmp_path / "fresh")
    assert snapshot_rows(_snapshot(tmp_path / "host", server.fleet)) == snapshot_rows(
        _snapshot(tmp_path / "fresh", server.fleet)
    )


def test_a_version_gap_means_a_full_download(
    server: sync.Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync.pull(server, tmp_path / "host")
    monkeypatch.setattr(artifacts, "DELTAS_KEPT", 2)
    fleet = Fleet.objects.get(slug=server.fleet)
    for n in range(3):
        Claim.objects.filter(fleet=fleet, number=1).update(text=f"edit {n}")
        workers.render_fleet(fleet)
    assert SnapshotDelta.objects.filter(fleet=fleet).count() == 2
    report = sync.pull(server, tmp_path / "host")
    assert contract.SNAPSHOT in report.changed and not report.delta
    assert delta.version_of(_snapshot(tmp_path / "host", server.fleet)) == 4


def test_a_format_change_means_a_full_download(server: sync.Remote, tmp_path: Path) -> None:
    sync.pull(server, tmp_path / "host")
    path = _snapshot(tmp_path / "host", server.fleet)
    db = sqlite3.connect(path)  # as if rendered by an older format
    db.execute("UPDATE meta SET value = '0' WHERE key = 'format_version'")
    db.commit()
    db.close()
    _change(Fleet.objects.get(slug=server.fleet))
    report = sync.pull(server, tmp_path / "host")
    assert not report.delta and "format_version differs" in report.notes[0]
    assert Snapshot(path, fleet=server.fleet).meta["format_version"] == "1"


def test_a_corrupted_delta_is_refused_whole_and_the_snapshot_downloaded(
    server: sync.Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync.pull(server, tmp_path / "host")
    path = _snapshot(tmp_path / "host", server.fleet)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    _change(Fleet.objects.get(slug=server.fleet))
    real = artifacts.snapshot_delta
    seen: list[str] = []

    def corrupted(fleet: Fleet, since: int) -> bytes | None:
        body = json.loads(real(fleet, since) or b"{}")
        body["tables"]["claims"]["upsert"][0][2] = "a quietly different text"
        return json.dumps(body).encode()

    def watch(report: sync.PullReport) -> None:  # before the delta, and before the full copy
        seen.append(hashlib.sha256(path.read_bytes()).hexdigest())

    monkeypatch.setattr(artifacts, "snapshot_delta", corrupted)
    original = sync._settle_journal
    monkeypatch.setattr(sync, "_settle_journal", lambda p: (watch(sync.PullReport()), original(p)))
    report = sync.pull(server, tmp_path / "host")
    assert len(seen) == 2 and set(seen) == {before}  # nothing of the refused delta written
    assert not report.delta and "digest" in report.notes[0]
    assert contract.SNAPSHOT in report.changed
    sync.pull(server, tmp_path / "fresh")
    assert snapshot_rows(path) == snapshot_rows(_snapshot(tmp_path / "fresh", server.fleet))


def test_the_delta_endpoint_answers_304_when_current_and_404_for_unknown_versions(
    server: sync.Remote,
) -> None:
    assert server.open("cache/delta?since=1") is None  # the latest: 304
    with pytest.raises(FileNotFoundError):
        server.open("cache/delta?since=7")
    with pytest.raises(sync.ServerDown):  # 400
        server.open("cache/delta?since=-1")


def test_a_change_to_most_claims_is_downloaded_whole(server: sync.Remote, tmp_path: Path) -> None:
    sync.pull(server, tmp_path / "host")
    fleet = Fleet.objects.get(slug=server.fleet)
    for claim in Claim.objects.filter(fleet=fleet):  # as a re-embedding would
        Claim.objects.filter(pk=claim.pk).update(embedding=_vector(claim.number + 1000))
    workers.render_fleet(fleet)
    report = sync.pull(server, tmp_path / "host")
    assert contract.SNAPSHOT in report.changed and not report.delta and not report.notes

"""Renders proportional to the change (claims.snapshot_update): a delta render must give the
same snapshot as a full render of the same rows, whatever the sequence of changes.

Each step makes a random change through the ORM (claims added, edited, retired, re-embedded,
cited, their events, a session's outcome, a contradiction, a lease), commits it, renders
the fleet as the worker does, and compares the published snapshot with a fresh full render
written beside it: the same rows in every table (vectors included), the same rows digest,
the same full-text search answers.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from claims import snapshot_changes, snapshot_render
from claims.models import Claim, ClaimEvent, Contradiction, Evidence, SnapshotChange
from ctxlake_site import workers
from fleet import artifacts, leases
from fleet.models import Agent, Fleet, Session, SnapshotDelta
from mcp_bridge import contract
from mcp_bridge.contract import delta, embed

WORDS = ("widgets retry", "database migration", "flaky pytest cache", "deploy rollback",
         "payments ledger", "docs build")
FTS_QUERIES = ("widgets", "database OR deploy", "flaky", "payments ledger", "edited", "docs")


def _vector(rng: random.Random) -> list[float]:
    v = np.random.default_rng(rng.randrange(10**9)).standard_normal(embed.DIMS)
    return list(v / np.linalg.norm(v))


class World:
    """The fleet under test and the random changes it can make."""

    def __init__(self, fleet: Fleet, agent: Agent, user: User, rng: random.Random) -> None:
        self.fleet, self.agent, self.user, self.rng = fleet, agent, user, rng
        self.next_number = 1
        self.sessions = [
            Session.objects.create(fleet=fleet, agent=agent, session_id=f"s-{i}")
            for i in range(4)
        ]

    def claims(self, **status: Any) -> list[Claim]:
        return list(Claim.objects.filter(fleet=self.fleet, **status).order_by("number"))

    def add(self) -> str:
        n, self.next_number = self.next_number, self.next_number + 1
        status = self.rng.choice(("promoted", "promoted", "proposed"))
        claim = Claim.objects.create(
            fleet=self.fleet, number=n, text=f"claim {n}: {self.rng.choice(WORDS)}", type="fact",
            subject=self.rng.choice(("ci", "db", "src/payments")), scope="fleet", status=status,
            promoted_at=timezone.now() if status == "promoted" else None,
            independent_sessions=1 + n % 3, confidence=round(self.rng.random(), 3),
            text_hash=f"{n:064d}", embedding=_vector(self.rng), embedding_model=embed.NAME,
        )
        session = self.rng.choice(self.sessions).session_id
        Evidence.objects.create(claim=claim, session_id=session, message_id=f"m-{n}",
                                path=f"src/f{n % 5}.py", repo="https://x.test/acme/shop")
        ClaimEvent.objects.create(claim=claim, kind="proposed", actor_agent=self.agent)
        return f"add cc-{n} ({status})"

    def edit(self) -> str:
        claims = self.claims()
        if not claims:
            return self.add()
        claim = self.rng.choice(claims)
        Claim.objects.filter(pk=claim.pk).update(text=f"{claim.text} edited",
                                                 confidence=round(self.rng.random(), 3))
        ClaimEvent.objects.create(claim=claim, kind="edited", actor_user=self.user)
        return f"edit {claim.public_id}"

    def promote(self) -> str:
        proposed = self.claims(status="proposed")
        if not proposed:
            return self.add()
        claim = self.rng.choice(proposed)
        Claim.objects.filter(pk=claim.pk).update(status="promoted", promoted_at=timezone.now())
        ClaimEvent.objects.create(claim=claim, kind="promoted", actor_user=self.user,
                                  data={"session": self.rng.choice(self.sessions).session_id})
        return f"promote {claim.public_id}"

    def retire(self) -> str:
        promoted = self.claims(status="promoted")
        if not promoted:
            return self.add()
        claim = self.rng.choice(promoted)
        if self.rng.random() < 0.5:
            Claim.objects.filter(pk=claim.pk).update(status="retracted")
            return f"retract {claim.public_id}"
        claim.delete()
        return f"delete {claim.public_id}"

    def reembed(self) -> str:
        claims = self.claims()
        if not claims:
            return self.add()
        claim = self.rng.choice(claims)
        vector = None if self.rng.random() < 0.3 else _vector(self.rng)
        Claim.objects.filter(pk=claim.pk).update(embedding=vector)
        return f"re-embed {claim.public_id}"

    def cite(self) -> str:
        claims = self.claims()
        if not claims:
            return self.add()
        claim = self.rng.choice(claims)
        Evidence.objects.create(claim=claim, session_id=self.rng.choice(self.sessions).session_id,
                                message_id=f"m-{self.rng.randrange(10**6)}",
                                path=f"lib/{self.rng.randrange(9)}.py")
        return f"cite {claim.public_id}"

    def outcome(self) -> str:
        session = self.rng.choice(self.sessions)
        session.outcome = self.rng.choice(("success", "failed", "partial"))
        session.ended_at = timezone.now()
        session.save()
        return f"session {session.session_id} {session.outcome}"

    def contradict(self) -> str:
        promoted = self.claims(status="promoted")
        if len(promoted) < 2:
            return self.add()
        a, b = sorted(self.rng.sample(promoted, 2), key=lambda c: c.pk)
        pair, _ = Contradiction.objects.get_or_create(claim=a, other=b,
                                                      defaults={"similarity": 0.97})
        if self.rng.random() < 0.3:
            Contradiction.objects.filter(pk=pair.pk).update(resolved_at=timezone.now())
        return f"contradiction {a.public_id}/{b.public_id}"

    def expire(self) -> str:
        promoted = self.claims(status="promoted")
        if not promoted:
            return self.add()
        claim = self.rng.choice(promoted)
        Claim.objects.filter(pk=claim.pk).update(valid_until=timezone.now() - timedelta(days=1))
        return f"expire {claim.public_id}"

    def lease(self) -> str:
        path = f"src/f{self.rng.randrange(5)}.py"
        if self.rng.random() < 0.7:
            leases.claim_paths(self.agent, [path], ttl=timedelta(minutes=30), reason="work")
            return f"lease {path}"
        leases.release_paths(self.agent)
        return "release all"

    def step(self) -> str:
        actions = (self.add, self.add, self.edit, self.promote, self.retire, self.reembed,
                   self.cite, self.outcome, self.contradict, self.expire, self.lease, self.lease)
        return self.rng.choice(actions)()


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                for t in delta.TABLES}
    finally:
        db.close()


def _fts(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    db = sqlite3.connect(path)
    try:
        return {q: db.execute("SELECT rowid, bm25(claims_fts) FROM claims_fts "
                              "WHERE claims_fts MATCH ? ORDER BY rank, rowid", (q,)).fetchall()
                for q in FTS_QUERIES}
    finally:
        db.close()


def _meta(path: Path) -> dict[str, str]:
    skip = {"generated_at", delta.META_VERSION, delta.META_DIGEST}
    return {k: v for k, v in delta.meta_of(path).items() if k not in skip}


def _assert_same_as_full(fleet: Fleet, tmp_path: Path) -> None:
    published = tmp_path / "published.sqlite"
    latest = artifacts.latest(fleet, contract.SNAPSHOT)
    assert latest is not None
    published.write_bytes(latest[1])
    full = tmp_path / "full.sqlite"
    snapshot_render.write_snapshot(fleet, full, generated_at=timezone.now())
    assert _rows(published) == _rows(full)
    db = sqlite3.connect(full)
    try:
        digest = delta.digest_of(delta.build_index(db))
    finally:
        db.close()
    assert delta.meta_of(published)[delta.META_DIGEST] == digest
    assert _meta(published) == _meta(full)
    assert _fts(published) == _fts(full)
    db = sqlite3.connect(published)  # the FTS index agrees with its content table
    try:
        db.execute("INSERT INTO claims_fts (claims_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        db.close()


@pytest.fixture
def world(transactional_db: None, fleet_a: Fleet, ada: Agent, mod: User,
          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    return World(fleet_a, ada, mod, random.Random(25))


@pytest.mark.parametrize(("seed", "local"), [(1, True), (2, False), (3, True)])
def test_it_renders_random_changes_as_a_full_render_would(
    world: World, tmp_path: Path, seed: int, local: bool, settings: Any
) -> None:
    """`local`: a delta starts from this host's copy of the snapshot; else from the render
    stored in the database (a worker host that keeps no cache dir)."""
    settings.CTXLAKE_LOCAL_CACHE = local
    world.rng.seed(seed)
    for _ in range(8):
        world.add()
    assert workers.render_fleet(world.fleet).snapshot == "full"
    seen = []
    for i in range(40):
        did = world.step()
        report = workers.render_fleet(world.fleet)
        seen.append(report.snapshot)
        try:
            _assert_same_as_full(world.fleet, tmp_path)
        except AssertionError as e:
            raise AssertionError(f"step {i} ({did}), rendered {report.snapshot}") from e
    assert "delta" in seen and "full" not in seen  # proportional, and never needed a rebuild


def test_it_leaves_the_snapshot_alone_on_a_lease_change(world: World, tmp_path: Path) -> None:
    for _ in range(5):
        world.add()
    workers.render_fleet(world.fleet)
    version = artifacts.snapshot_version(world.fleet)
    leases.claim_paths(world.agent, ["src/f1.py"], ttl=timedelta(minutes=30), reason="work")
    report = workers.render_fleet(world.fleet)
    assert report.snapshot == "unchanged"
    assert artifacts.snapshot_version(world.fleet) == version  # no new snapshot published
    roster = artifacts.latest(world.fleet, contract.ROSTER)
    assert roster is not None and b"src/f1.py" in roster[1]  # the small files did change
    local = tmp_path / "cache" / world.fleet.slug / contract.SNAPSHOT
    assert delta.version_of(local) == version  # the local copy is the latest too
    _assert_same_as_full(world.fleet, tmp_path)


def test_it_reads_only_the_changed_claims(world: World, tmp_path: Path) -> None:
    for _ in range(30):
        world.add()
    workers.render_fleet(world.fleet)
    world.edit()
    report = workers.render_fleet(world.fleet)
    assert report.snapshot == "delta"
    step = SnapshotDelta.objects.filter(fleet=world.fleet).order_by("-version").first()
    assert step is not None and step.chain == 1
    assert len(delta.decode(bytes(step.body))["tables"]["claims"]["upsert"]) <= 1
    # the change rows the render consumed are pruned once every later cursor sees them:
    # every row below the stored cursor's xmin, which on a server with no other transaction
    # in progress (the cursor's list of them empty) is all but the last few. Transaction ids
    # are the server's, so another test worker's open transaction holds the xmin back.
    left = SnapshotChange.objects.filter(fleet_id=world.fleet.pk)
    assert not left.filter(xid__lt=snapshot_changes.xmin(step.cursor)).exists()
    in_progress = step.cursor.split(":")[2]
    assert left.count() <= 3 or in_progress, step.cursor
    _assert_same_as_full(world.fleet, tmp_path)


def test_it_rebuilds_whole_after_a_rename_and_after_a_long_chain(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from claims import snapshot_update

    world.add()
    world.promote()
    workers.render_fleet(world.fleet)
    world.user.username = "moderator-renamed"
    world.user.save()
    assert workers.render_fleet(world.fleet).snapshot == "full"
    _assert_same_as_full(world.fleet, tmp_path)
    monkeypatch.setattr(snapshot_update, "FULL_REBUILD_AFTER", 2)
    hows = []
    for _ in range(3):
        world.edit()
        hows.append(workers.render_fleet(world.fleet).snapshot)
    assert hows == ["delta", "delta", "full"]
    _assert_same_as_full(world.fleet, tmp_path)


def test_it_rebuilds_whole_when_the_previous_snapshot_is_another_format(
    world: World, tmp_path: Path
) -> None:
    world.add()
    workers.render_fleet(world.fleet)
    SnapshotDelta.objects.filter(fleet=world.fleet).update(meta={"format_version": "0"})
    world.edit()
    assert workers.render_fleet(world.fleet).snapshot == "full"
    _assert_same_as_full(world.fleet, tmp_path)


def test_it_misses_no_change_committed_after_the_render_began(
    world: World, tmp_path: Path
) -> None:
    """A transaction that wrote before the render took its cursor and commits after the
    render read (its id older than the render's): the next render must still read it."""
    import threading

    from django.db import connection, transaction

    for _ in range(3):
        world.add()
    world.promote()
    workers.render_fleet(world.fleet)
    target = world.claims(status="promoted")[0]
    wrote, rendered = threading.Event(), threading.Event()

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                Claim.objects.filter(pk=target.pk).update(text="written by a slow transaction")
                wrote.set()
                assert rendered.wait(60)
        finally:
            connection.close()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert wrote.wait(60)
    world.edit()  # another change, so this render publishes a delta at a newer cursor
    workers.render_fleet(world.fleet)
    rendered.set()
    writer.join(60)
    assert workers.render_fleet(world.fleet).snapshot == "delta"
    published = tmp_path / "check.sqlite"
    latest = artifacts.latest(world.fleet, contract.SNAPSHOT)
    assert latest is not None
    published.write_bytes(latest[1])
    texts = {row[2] for row in _rows(published)["claims"]}
    assert "written by a slow transaction" in texts
    _assert_same_as_full(world.fleet, tmp_path)


def test_it_rebuilds_whole_after_memory_was_off(world: World, tmp_path: Path) -> None:
    """Changes made while memory is off are never read by a render (none is made): the
    first snapshot after it is back on is a full rebuild, and nothing piles up meanwhile."""
    world.add()
    workers.render_fleet(world.fleet)
    Fleet.objects.filter(pk=world.fleet.pk).update(memory_mode="off")
    world.fleet.refresh_from_db()
    workers.render_fleet(world.fleet)
    world.edit()
    world.add()
    workers.render_fleet(world.fleet)
    assert not SnapshotChange.objects.filter(fleet_id=world.fleet.pk).exists()
    Fleet.objects.filter(pk=world.fleet.pk).update(memory_mode="live")
    world.fleet.refresh_from_db()
    assert workers.render_fleet(world.fleet).snapshot == "full"
    _assert_same_as_full(world.fleet, tmp_path)


def test_a_deleted_fleet_leaves_no_change_rows(world: World, fleet_b: Fleet) -> None:
    """Deleting a fleet deletes its promoted claims, whose triggers note each one; no render
    of that fleet will ever prune them, so the fleet row's own deletion removes them
    (claims migration 0013). Another fleet's rows stay."""
    for _ in range(6):
        world.add()
    Claim.objects.create(fleet=fleet_b, number=1, text="b's claim", type="fact", subject="b",
                         scope="fleet", status="promoted", promoted_at=timezone.now(),
                         independent_sessions=1, text_hash="b" * 64)
    assert SnapshotChange.objects.filter(fleet_id=world.fleet.pk).exists()
    gone = world.fleet.pk
    world.fleet.delete()
    assert not SnapshotChange.objects.filter(fleet_id=gone).exists()
    assert SnapshotChange.objects.filter(fleet_id=fleet_b.pk).count() == 1


def test_a_lease_change_alone_reads_no_claim_rows_for_the_snapshot(
    world: World, tmp_path: Path
) -> None:
    """Renders proportional to the change: with no change row and no open contradiction,
    the snapshot's render reads the change log and which claims are contradicted, and
    nothing of the claims, their citations, their timeline or the contradictions' rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from claims import snapshot_update

    for _ in range(5):
        world.add()
    workers.render_fleet(world.fleet)
    Contradiction.objects.filter(claim__fleet=world.fleet).update(resolved_at=timezone.now())
    before = workers.render_fleet(world.fleet)
    leases.claim_paths(world.agent, ["src/f1.py"], ttl=timedelta(minutes=30), reason="work")
    with CaptureQueriesContext(connection) as q:
        done = snapshot_update.render_snapshot(world.fleet, tmp_path / "s.sqlite",
                                               now=timezone.now())
    assert (done.how, done.claims) == ("unchanged", before.claims)
    read = " ".join(x["sql"] for x in q.captured_queries)
    for table in ("claims_evidence", "claims_claimevent", "fleet_session"):
        assert f'"{table}"' not in read and f" {table} " not in read, table
    # which claims are in an open contradiction, once; not the contradictions' rows again
    assert sum("claims_contradiction" in x["sql"] for x in q.captured_queries) == 1

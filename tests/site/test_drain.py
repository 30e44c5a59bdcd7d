"""Draining spools written by the bridge's own Spool writer into Postgres."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from claims.models import Claim
from ctxlake_site import drain, workers
from ctxlake_site.drain import DrainReport
from fleet import applied
from fleet.models import Agent, AppliedEvent, Fleet, Handoff, Lease, Session, SpoolCursor
from mcp_bridge.contract.spool import Spool

CITE = [{"session_id": "s1", "message_id": "m1"}]
SpoolFor = Callable[..., Spool]


def _raw_line(spool_dir: Path, fleet: str, line: bytes) -> None:
    path = spool_dir / "mcp" / f"{fleet}.ndjson"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(line)


def _event(fleet: str, **over: object) -> dict[str, object]:
    return {
        "v": 1,
        "id": str(uuid.uuid4()),
        "kind": "lease.claim",
        "fleet": fleet,
        "agent": "ada",
        "session": None,
        "at": "2026-01-01T00:00:00Z",
        "payload": {"paths": ["x.py"], "reason": "r", "ttl_secs": 600},
        **over,
    }


def _dead(spool_dir: Path, fleet: str) -> list[dict[str, object]]:
    path = spool_dir / "dead" / f"{fleet}.ndjson"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_it_applies_each_kind_and_creates_agents_and_sessions(
    fleet_a: Fleet, spool_for: SpoolFor, spool_dir: Path
) -> None:
    spool = spool_for("fleet-a", "ada", session="s1")
    spool.append("lease.claim", {"paths": ["src/**"], "reason": "refactor", "ttl_secs": 600})
    spool.append("handoff.create", {"summary": "half done", "status": "blocked", "next": "tests"})
    spool.append(
        "claim.proposed",
        {
            "claim": "make lint needs ruff",
            "type": "gotcha",
            "subject": "lint",
            "scope": "agent",
            "evidence": CITE,
        },
    )
    fleet_scoped = {"claim": "x", "type": "fact", "subject": "s", "scope": "fleet",
                    "evidence": CITE}  # the Spool writer refuses it; a hostile one may not
    _raw_line(spool_dir, "fleet-a", json.dumps(
        _event("fleet-a", kind="claim.proposed", payload=fleet_scoped)).encode() + b"\n")
    spool_for("fleet-a", "bo").append(
        "lease.claim", {"paths": ["src/a.py"], "reason": "", "ttl_secs": 600}
    )
    spool.append("lease.release", {"paths": [], "all": True})
    report = workers.drain_spool()
    assert (report.applied, report.dead, report.duplicates) == (5, 1, 0)
    assert "scope must be 'agent'" in _dead(spool_dir, "fleet-a")[0]["reason"]
    ada = Agent.objects.get(fleet=fleet_a, agent_id="ada")
    assert ada.last_seen_at is not None
    s1 = Session.objects.get(session_id="s1")
    assert s1.agent == ada  # the session is recorded as seen: its citations are verified
    assert s1.first_seen_at is not None and s1.last_seen_at >= s1.first_seen_at
    handoff = Handoff.objects.get()
    assert (handoff.source_trust, handoff.status, handoff.from_session.session_id) == (
        "agent",
        "blocked",
        "s1",
    )
    claim = Claim.objects.get()
    assert (claim.status, claim.scope) == ("proposed", "agent")
    assert list(Lease.objects.active().values_list("agent__agent_id", flat=True)) == ["bo"]
    bo_claim = AppliedEvent.objects.get(kind="lease.claim", result__held=["src/a.py"])
    assert bo_claim.result["contention"][0]["other_agent"] == "ada"


def test_a_second_pass_and_a_replayed_line_apply_nothing(
    fleet_a: Fleet, spool_dir: Path, spool_for: SpoolFor
) -> None:
    spool_for("fleet-a", "ada").append(
        "claim.proposed", {"claim": "x needs y", "type": "fact", "subject": "x", "evidence": CITE}
    )
    assert workers.drain_spool().applied == 1
    line = (spool_dir / "mcp" / "fleet-a.ndjson").read_bytes()
    _raw_line(spool_dir, "fleet-a", line)  # the same event id again
    report = workers.drain_spool()
    assert (report.applied, report.duplicates) == (0, 1)
    assert Claim.objects.count() == 1 and AppliedEvent.objects.count() == 1


def test_a_torn_last_line_waits_until_it_is_completed(
    fleet_a: Fleet, spool_dir: Path, spool_for: SpoolFor
) -> None:
    spool_for("fleet-a", "ada").append(
        "lease.claim", {"paths": ["a"], "reason": "", "ttl_secs": 60}
    )
    whole = json.dumps(_event("fleet-a", payload={"paths": ["b"], "reason": "", "ttl_secs": 60}))
    _raw_line(spool_dir, "fleet-a", whole[:40].encode())
    assert workers.drain_spool().applied == 1
    _raw_line(spool_dir, "fleet-a", (whole[40:] + "\n").encode())
    report = workers.drain_spool()
    assert (report.applied, report.dead) == (1, 0)
    assert sorted(Lease.objects.values_list("path", flat=True)) == ["a", "b"]


def test_a_corrupt_line_goes_to_dead_letter_and_the_rest_are_applied(
    fleet_a: Fleet, spool_dir: Path
) -> None:
    good = [
        json.dumps(_event("fleet-a", payload={"paths": [p], "reason": "", "ttl_secs": 60}))
        for p in ("a", "b")
    ]
    hostile = [
        b"{not json",
        b"[1, 2, 3]",
        json.dumps(_event("fleet-a", v=99)).encode(),
        json.dumps(_event("fleet-a", id="not-a-uuid")).encode(),
        json.dumps(_event("fleet-b")).encode(),  # another fleet's event in this fleet's file
        json.dumps(_event("fleet-a", kind="claim.promoted")).encode(),
        json.dumps(_event("fleet-a", agent="")).encode(),
        json.dumps(_event("fleet-a", at="yesterday")).encode(),
        json.dumps(_event("fleet-a", payload="paths")).encode(),
        json.dumps(_event("fleet-a", payload={"paths": ["/etc/passwd"], "ttl_secs": 60})).encode(),
        json.dumps(_event("fleet-a", payload={"paths": ["a"], "ttl_secs": -5})).encode(),
        json.dumps(
            _event(
                "fleet-a",
                kind="claim.proposed",
                payload={"claim": "c", "type": "fact", "subject": "s", "evidence": []},
            )
        ).encode(),
        b"\xff\xfe binary garbage",
    ]
    _raw_line(spool_dir, "fleet-a", (good[0] + "\n").encode())
    _raw_line(spool_dir, "fleet-a", b"\n".join(hostile) + b"\n")
    _raw_line(spool_dir, "fleet-a", (good[1] + "\n").encode())
    report = workers.drain_spool()
    assert (report.applied, report.dead) == (2, len(hostile))
    reasons = [d["reason"] for d in _dead(spool_dir, "fleet-a")]
    assert reasons[0].startswith("not JSON") and "No evidence" in reasons[-2]
    assert "does not match" in reasons[4] and "absolute" in reasons[9]
    assert sorted(Lease.objects.values_list("path", flat=True)) == ["a", "b"]
    assert workers.drain_spool().dead == 0  # dead lines are not reprocessed


def test_it_scrubs_secrets_again_at_ingest(fleet_a: Fleet, spool_dir: Path) -> None:
    key = "sk-ant-" + "api03-" + "A" * 40
    raw = _event(
        "fleet-a",
        kind="claim.proposed",
        payload={
            "claim": f"use {key} for the eval",
            "type": "fact",
            "subject": "eval",
            "evidence": [
                {"session_id": "s", "message_id": "m", "excerpt": f"ANTHROPIC_API_KEY={key}"}
            ],
        },
    )
    _raw_line(spool_dir, "fleet-a", (json.dumps(raw) + "\n").encode())
    assert workers.drain_spool().applied == 1
    claim = Claim.objects.get()
    assert key not in claim.text and key not in claim.evidence.get().excerpt


def test_it_drains_rotated_files_in_order_and_retires_them(
    fleet_a: Fleet, spool_dir: Path, spool_for: SpoolFor
) -> None:
    spool = spool_for("fleet-a", "ada", file_max_bytes=600)
    for i in range(10):
        spool.append("lease.claim", {"paths": [f"f{i}.py"], "reason": "", "ttl_secs": 60})
    files = sorted((spool_dir / "mcp").glob("fleet-a*.ndjson"))
    assert len(files) > 2
    report = workers.drain_spool()
    assert report.applied == 10 and report.files_retired == len(files) - 1
    assert [p.name for p in (spool_dir / "mcp").glob("*.ndjson")] == ["fleet-a.ndjson"]
    order = list(AppliedEvent.objects.order_by("id").values_list("result", flat=True))
    assert [r["held"][0] for r in order] == [f"f{i}.py" for i in range(10)]


def test_a_file_rotated_mid_read_continues_where_it_stopped(
    fleet_a: Fleet, spool_dir: Path, spool_for: SpoolFor
) -> None:
    spool = spool_for("fleet-a", "ada")
    spool.append("lease.claim", {"paths": ["one"], "reason": "", "ttl_secs": 60})
    assert workers.drain_spool().applied == 1
    spool.append("lease.claim", {"paths": ["two"], "reason": "", "ttl_secs": 60})
    active = spool_dir / "mcp" / "fleet-a.ndjson"
    active.rename(spool_dir / "mcp" / "fleet-a.20260101T000000.000000Z.ndjson")  # as _rotate does
    report = workers.drain_spool()
    assert (report.applied, report.duplicates) == (1, 0)


def test_it_quarantines_the_spool_of_an_unknown_fleet_and_requeues_it(
    db: None, spool_dir: Path, spool_for: SpoolFor
) -> None:
    from ctxlake_site import drain, pipeline_status

    spool_for("ghost", "ada").append("lease.claim", {"paths": ["a"], "reason": "", "ttl_secs": 60})
    report = workers.drain_spool()
    assert report.applied == 0 and report.quarantined[0].startswith("ghost.")
    assert not list((spool_dir / "mcp").glob("ghost*.ndjson"))  # moved aside, not deleted
    (listed,) = pipeline_status.quarantined_files(spool_dir)
    assert listed.fleet == "ghost" and listed.bytes > 0
    assert workers.drain_spool().quarantined == []  # logged once: nothing new to move
    Fleet.objects.create(slug="ghost", name="ghost")
    assert drain.requeue_quarantined(spool_dir, "ghost") == 1
    assert workers.drain_spool().applied == 1
    assert pipeline_status.quarantined_files(spool_dir) == []


def test_it_dead_letters_an_endless_line_instead_of_stalling(
    fleet_a: Fleet, spool_dir: Path, monkeypatch: object
) -> None:
    from ctxlake_site import drain

    _raw_line(spool_dir, "fleet-a", b"x" * (drain.LINE_LIMIT_BYTES + 10))
    _raw_line(spool_dir, "fleet-a", b"\n" + json.dumps(_event("fleet-a")).encode() + b"\n")
    report = workers.drain_spool()
    assert report.applied == 1 and report.dead >= 1


def test_only_one_follower_polls_a_spool_at_a_time(db: None, spool_dir: Path) -> None:
    from django.db import connections

    other = connections.create_connection("default")  # another worker's session
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [workers.follower_key()])
        assert workers.drain_spool_follow(follow_secs=0, poll_secs=0) == (
            "another drain is already following this spool"
        )
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [workers.follower_key()])
    finally:
        other.close()
    assert workers.drain_spool_follow(follow_secs=0, poll_secs=0).startswith("drained")


def test_a_follower_hands_its_worker_to_a_waiting_render(
    fleet_a: Fleet, spool_dir: Path
) -> None:
    """A render queued behind a follower (every other worker busy) must not wait out the
    follow: the follower drains, sees the render waiting past a poll, and ends."""
    import time

    from django.core.cache import cache

    from fleet import rendering

    _raw_line(spool_dir, "fleet-a", (json.dumps(_event("fleet-a")) + "\n").encode())
    cache.set(rendering.pending_key(fleet_a.pk), str(time.time() - 5), timeout=60)
    try:
        assert rendering.renders_waiting(longer_than=1) == 1
        done = workers.drain_spool_follow(follow_secs=120, poll_secs=1, chain=False)
    finally:
        cache.delete(rendering.pending_key(fleet_a.pk))
    assert done == "drained 1 event(s), 0 dead-lettered; ended early for a waiting render"
    assert Lease.objects.filter(fleet=fleet_a).count() == 1  # the drain itself went on
    # a render that has only just been queued gets the poll's time to find a free worker
    cache.set(rendering.pending_key(fleet_a.pk), str(time.time() + 60), timeout=60)
    try:
        assert rendering.renders_waiting(longer_than=1) == 0
    finally:
        cache.delete(rendering.pending_key(fleet_a.pk))


def _follow_while_a_render_comes(fleet: Fleet, monkeypatch: pytest.MonkeyPatch,
                                 make_render: Callable[[], None]) -> str:
    """Follow with a 600 s poll while another thread runs `make_render` once the follower's
    first drain is done (so it comes while the follower waits); what the follower says."""
    import threading

    from django.core.cache import cache
    from django.db import connection

    from fleet import rendering

    drained = threading.Event()
    real_drain = workers.drain_spool

    def drain() -> DrainReport:
        try:
            return real_drain()
        finally:
            drained.set()

    def render_meanwhile() -> None:
        drained.wait(timeout=60)
        try:
            make_render()
        finally:
            connection.close()

    other = threading.Thread(target=render_meanwhile)
    monkeypatch.setattr(workers, "drain_spool", drain)
    other.start()
    try:
        return workers.drain_spool_follow(follow_secs=1200, poll_secs=600, chain=False)
    finally:
        other.join(timeout=60)
        cache.delete(rendering.pending_key(fleet.pk))


@pytest.mark.django_db(transaction=True)  # the render's task and notice commit, as in a cluster
def test_a_follower_between_polls_hands_over_to_a_render_queued_meanwhile(
    fleet_a: Fleet, spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A render queued while the follower sleeps out a long poll does not wait the poll: the
    follower hears the task broker's notice and looks HANDOVER_SECS later. The render is
    requested from another thread once the follower's drain is done and it waits; with a
    600 s poll, only that notice can end it."""
    from fleet import rendering

    # request_render marks the render pending and queues its task
    done = _follow_while_a_render_comes(fleet_a, monkeypatch,
                                        lambda: rendering.request_render(fleet_a))
    assert done.endswith("ended early for a waiting render"), done


def test_an_idle_follower_looks_for_waiting_renders_once_a_poll(
    fleet_a: Fleet, spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the broker's notices and no task queued, a follower asks whether a render waits
    once a poll (beside its drain), not every HANDOVER_SECS: each such question is a wake-up
    and a round trip to Postgres."""
    from fleet import rendering

    looks: list[float] = []
    real = rendering.renders_waiting

    def counted(longer_than: float) -> int:
        looks.append(longer_than)
        return real(longer_than)

    drains: list[DrainReport] = []
    real_drain = workers.drain_spool

    def drain() -> DrainReport:
        drains.append(real_drain())
        return drains[-1]

    monkeypatch.setattr(rendering, "renders_waiting", counted)
    monkeypatch.setattr(workers, "drain_spool", drain)
    done = workers.drain_spool_follow(follow_secs=7, poll_secs=3, chain=False)
    assert done == "drained 0 event(s), 0 dead-lettered"
    assert len(drains) >= 2
    assert len(looks) == len(drains) - 1, looks  # one look between two drains


def test_a_follower_without_the_brokers_notices_looks_every_handover(
    fleet_a: Fleet, spool_dir: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """With a broker that sends no notice (Redis), the follower looks every HANDOVER_SECS:
    a render marked pending by another process, with no notice, still ends a 600 s poll."""
    import time

    from django.core.cache import cache

    from fleet import rendering

    settings.Q_CLUSTER = {k: v for k, v in settings.Q_CLUSTER.items() if k != "broker_class"}

    def mark_a_render() -> None:
        cache.set(rendering.pending_key(fleet_a.pk),
                  str(time.time() - workers.HANDOVER_SECS), timeout=60)

    done = _follow_while_a_render_comes(fleet_a, monkeypatch, mark_a_render)
    assert done.endswith("ended early for a waiting render"), done


def test_last_seen_moves_forward_only(fleet_a: Fleet, spool_dir: Path) -> None:
    """An agent's last_seen_at is its latest event's time; an older event replayed from a
    rotated file later does not move it back."""
    lines = [
        _event("fleet-a", at="2026-01-01T00:00:05Z", payload={"paths": ["a"], "ttl_secs": 60}),
        _event("fleet-a", at="2026-01-01T00:00:09Z", payload={"paths": ["b"], "ttl_secs": 60}),
    ]
    _raw_line(spool_dir, "fleet-a", "".join(json.dumps(e) + "\n" for e in lines).encode())
    workers.drain_spool()
    ada = Agent.objects.get(fleet=fleet_a, agent_id="ada")
    assert ada.last_seen_at.isoformat() == "2026-01-01T00:00:09+00:00"
    older = _event("fleet-a", at="2026-01-01T00:00:01Z", payload={"paths": ["c"], "ttl_secs": 60})
    _raw_line(spool_dir, "fleet-a", (json.dumps(older) + "\n").encode())
    workers.drain_spool()
    ada.refresh_from_db()
    assert ada.last_seen_at.isoformat() == "2026-01-01T00:00:09+00:00"


def test_a_batch_ends_at_its_line_count_or_its_bytes(
    fleet_a: Fleet, spool_for: SpoolFor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch is one transaction held in memory whole: bounded by lines and by bytes."""
    spool = spool_for("fleet-a", "ada")
    for i in range(10):
        spool.append("lease.claim", {"paths": [f"f{i}.py"], "reason": "x" * 500,
                                     "ttl_secs": 600})
    sizes = [len(line) for line in spool.path.read_bytes().splitlines()]
    batches: list[int] = []

    def progress(report: DrainReport) -> None:
        batches.append(report.applied - sum(batches))

    monkeypatch.setattr(drain, "BATCH_EVENTS", 4)
    assert workers.drain_spool(progress=progress).applied == 10
    assert batches == [4, 4, 2]

    Lease.objects.all().delete()
    AppliedEvent.objects.all().delete()
    SpoolCursor.objects.all().delete()
    batches.clear()
    monkeypatch.setattr(drain, "BATCH_BYTES", 2 * max(sizes) + 1)  # < 3 lines' bytes
    assert 3 * min(sizes) > 2 * max(sizes) + 1
    assert workers.drain_spool(progress=progress).applied == 10
    assert batches == [3, 3, 3, 1]  # the line that reaches the budget ends its batch
    assert Lease.objects.count() == 10


def test_an_id_another_drain_records_meanwhile_is_applied_once(
    fleet_a: Fleet, spool_for: SpoolFor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unique event id, not the look-up before applying, keeps an event from applying
    twice: if another drain records an id after this batch looked, the batch's record is
    refused, the batch rolls back, and the redo event by event skips that id."""
    spool = spool_for("fleet-a", "ada")
    spool.append("lease.claim", {"paths": ["a.py"], "reason": "", "ttl_secs": 600})
    spool.append("lease.claim", {"paths": ["b.py"], "reason": "", "ttl_secs": 600})
    first = json.loads(spool.path.read_text().splitlines()[0])
    AppliedEvent.objects.create(event_id=first["id"], fleet=fleet_a, kind="lease.claim",
                                result={"by": "the other drain"})
    monkeypatch.setattr(applied, "known", lambda ids: set())  # it looked before that

    report = workers.drain_spool()

    assert (report.applied, report.duplicates, report.dead) == (1, 1, 0)
    assert list(Lease.objects.values_list("path", flat=True)) == ["b.py"]
    assert AppliedEvent.objects.get(event_id=first["id"]).result == {"by": "the other drain"}

"""Retention per fleet: ages on the Fleet (admin, create_fleet), applied by maintain_db in
batches, shown by doctor; claim events are never pruned."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from claims import moderation
from claims.models import ClaimEvent
from fleet import retention
from fleet.models import (
    RETAIN_MAX_DAYS,
    RETENTION,
    Activity,
    Agent,
    AppliedEvent,
    DeadLetter,
    Fleet,
    Session,
)

ROOT = Path(__file__).resolve().parents[2]
OLD = timedelta(days=400)  # past every default age
RECENT = timedelta(days=2)  # within every age a fleet may set (the smallest is 1 day)


def _rows(fleet: Fleet, agent: Agent, age: timedelta, n: int = 1) -> None:
    """n rows of each pruned kind, `age` old, and a session holding transcript text."""
    at = timezone.now() - age
    Activity.objects.bulk_create(
        [Activity(fleet=fleet, verb="lease.claimed", at=at) for _ in range(n)])
    AppliedEvent.objects.bulk_create(
        [AppliedEvent(event_id=uuid.uuid4(), fleet=fleet, kind="lease.claim", applied_at=at)
         for _ in range(n)])
    DeadLetter.objects.bulk_create(
        [DeadLetter(fleet=fleet, file="x.ndjson", cursor_key=1,
                    offset=uuid.uuid4().int % 10**12, reason="bad", line="{}", created_at=at)
         for _ in range(n)])
    Session.objects.bulk_create(
        [Session(fleet=fleet, agent=agent, session_id=f"s-{uuid.uuid4()}", started_at=at,
                 ended_at=at, repo="shop", outcome="success", summary="fixed the refund flow",
                 changed_paths=["src/refund.py"],
                 capture_withheld=[{"extractor": "x", "text": "t", "spans": []}])
         for _ in range(n)])


def _counts(fleet: Fleet) -> tuple[int, int, int, int]:
    return (Activity.objects.filter(fleet=fleet).count(),
            AppliedEvent.objects.filter(fleet=fleet).count(),
            DeadLetter.objects.filter(fleet=fleet).count(),
            Session.objects.filter(fleet=fleet).exclude(summary="").count())


@pytest.fixture
def aged(fleet_a: Fleet, ada: Agent, fleet_b: Fleet, cy: Agent) -> dict[str, Any]:
    """fleet_a: 3 old and 1 recent of each, and an old claim event; fleet_b keeps all (0)."""
    _rows(fleet_a, ada, OLD, 3)
    _rows(fleet_a, ada, RECENT, 1)
    _rows(fleet_b, cy, OLD, 2)
    Fleet.objects.filter(pk=fleet_b.pk).update(**{r.field: 0 for r in RETENTION})
    with time_machine.travel(timezone.now() - OLD * 3, tick=False):  # append-only: no UPDATE
        proposal = moderation.propose_claim(
            fleet_a, text="Refunds go through the outbox.", type="fact", subject="payments",
            evidence=[{"session_id": "s-1", "message_id": "m-1"}], by_agent=ada)
    return {"events": ClaimEvent.objects.filter(claim__fleet=fleet_a).count(),
            "claim": proposal}


def test_a_prune_removes_what_is_past_each_age_and_keeps_the_audit(
    aged: dict[str, Any], fleet_a: Fleet, fleet_b: Fleet,
) -> None:
    before = _counts(fleet_a)
    done = retention.prune(batch=2)
    by_kind = {p.kind: p for p in done if p.fleet == fleet_a.slug}
    assert {k: p.done for k, p in by_kind.items()} == {
        "activity": 3, "applied_events": 3, "dead_letters": 3, "session_transcripts": 3}
    after = _counts(fleet_a)
    assert after == (before[0] - 3, 1, 1, 1)  # the claim's own activity row is recent
    assert _counts(fleet_b) == (2, 2, 2, 2)  # 0 keeps them for good
    assert ClaimEvent.objects.filter(claim__fleet=fleet_a).count() == aged["events"] >= 1
    cleared = Session.objects.filter(fleet=fleet_a, summary="")
    assert cleared.count() == 3  # the rows stay: evidence cites their ids
    assert [(s.repo, s.outcome, s.changed_paths, s.capture_withheld) for s in cleared] == [
        ("shop", "success", [], [])] * 3
    assert all(p.done == 0 for p in retention.prune())  # a second run finds nothing


def test_a_prune_goes_in_batches_and_reports_progress(fleet_a: Fleet, ada: Agent) -> None:
    _rows(fleet_a, ada, OLD, 5)
    heard: list[tuple[str, int, int]] = []
    retention.prune(batch=2, say=lambda p: heard.append((p.kind, p.done, p.matched)))
    assert [h for h in heard if h[0] == "activity"] == [
        ("activity", 2, 5), ("activity", 4, 5), ("activity", 5, 5)]
    with pytest.raises(ValueError, match="batch"):
        retention.prune(batch=0)


def test_maintain_db_is_a_dry_run_without_commit_and_says_so_in_json(
    aged: dict[str, Any], fleet_a: Fleet,
) -> None:
    before = _counts(fleet_a)
    out, err = StringIO(), StringIO()
    call_command("maintain_db", "--json", stdout=out, stderr=err)
    report = json.loads(out.getvalue())
    assert report["commit"] is False and _counts(fleet_a) == before
    mine = {r["kind"]: r for r in report["retention"] if r["fleet"] == fleet_a.slug}
    assert mine["activity"]["matched"] == 3 and mine["activity"]["done"] == 0
    assert mine["dead_letters"]["days"] == retention.RETAIN_DEAD.default_days
    assert any(a.startswith("VACUUM") for a in report["maintenance"])
    assert "past their fleet age" in err.getvalue()  # progress, not mixed into the JSON


def test_maintain_db_commit_prunes_with_progress_counts(
    aged: dict[str, Any], fleet_a: Fleet, transactional_db: None,
) -> None:
    out = StringIO()
    call_command("maintain_db", "--commit", "--batch-size", "2", stdout=out)
    text = out.getvalue()
    assert f"pruning: {fleet_a.slug} activity: 2 of 3" in text
    assert f"pruned: {fleet_a.slug} dead_letters: 3 older than 90 day(s)" in text
    assert _counts(fleet_a)[1:] == (1, 1, 1)


@pytest.mark.parametrize("value", ["0", "-1", "100001", "99999999999999999999999", "1\x00"])
def test_maintain_db_refuses_a_hostile_batch_size(value: str, db: None) -> None:
    with pytest.raises(CommandError, match="batch-size|invalid int"):
        call_command("maintain_db", f"--batch-size={value}", stdout=StringIO())


def test_the_daily_job_applies_retention(aged: dict[str, Any], fleet_a: Fleet,
                                         transactional_db: None) -> None:
    from ctxlake_site import workers

    assert "pruned 12 row(s) past their fleet's retention" in workers.maintain_db_task()
    assert _counts(fleet_a)[1:] == (1, 1, 1)


# -- setting the ages ---------------------------------------------------------------------

def test_create_fleet_takes_each_age_and_defaults_to_the_one_definition(db: None) -> None:
    call_command("create_fleet", "keep", "--retain-activity-days", "30",
                 "--retain-transcripts-days", "0", stdout=StringIO())
    fleet = Fleet.objects.get(slug="keep")
    assert (fleet.retain_activity_days, fleet.retain_transcripts_days) == (30, 0)
    assert fleet.retain_applied_events_days == retention.RETAIN_APPLIED.default_days
    assert fleet.retain_dead_letters_days == retention.RETAIN_DEAD.default_days


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--retain-activity-days", "-1", "retain_activity_days"),
    ("--retain-activity-days", "3", "0 \\(keep for good\\) or 7"),  # below its minimum
    ("--retain-applied-events-days", str(RETAIN_MAX_DAYS + 1), "retain_applied_events_days"),
    ("--retain-dead-letters-days", "9" * 30, "retain_dead_letters_days"),
    ("--retain-transcripts-days", "9" * 5000, "invalid int"),
    ("--retain-transcripts-days", "30\x00", "invalid int"),
    ("--retain-transcripts-days", "", "invalid int"),
])
def test_create_fleet_refuses_hostile_ages(option: str, value: str, says: str,
                                           db: None) -> None:
    with pytest.raises(CommandError, match=says):
        call_command("create_fleet", "hostile", f"{option}={value}", stdout=StringIO())
    assert not Fleet.objects.filter(slug="hostile").exists()


def test_the_database_refuses_an_age_outside_the_rule(fleet_a: Fleet) -> None:
    for rule, bad in ((RETENTION[0], 3), (RETENTION[1], -5), (RETENTION[2], RETAIN_MAX_DAYS + 1)):
        with pytest.raises(IntegrityError), transaction.atomic():
            Fleet.objects.filter(pk=fleet_a.pk).update(**{rule.field: bad})


def _admin_post(client: Client, fleet: Fleet, **ages: str) -> Any:
    data = {"slug": fleet.slug, "name": fleet.name, "memory_mode": fleet.memory_mode,
            "capture_mode": fleet.capture_mode, "capture_max_candidates": "5",
            "default_lease_ttl_secs": "3600", "min_independent_sessions": "1",
            "repo_url_template": "", "moderators-TOTAL_FORMS": "0",
            "moderators-INITIAL_FORMS": "0", "moderators-MIN_NUM_FORMS": "0",
            "moderators-MAX_NUM_FORMS": "1000", "retire_idle_hours": str(fleet.retire_idle_hours)}
    data.update({r.field: str(getattr(fleet, r.field)) for r in RETENTION})
    data.update(ages)
    return client.post(f"/admin/fleet/fleet/{fleet.pk}/change/", data)


@pytest.mark.parametrize("value", ["-1", "3", "36501", "99999999999999999999", "7\x00", "x",
                                   "1e3"])
def test_the_admin_refuses_hostile_ages_and_keeps_the_fleet(
    value: str, root_client: Client, fleet_a: Fleet,
) -> None:
    response = _admin_post(root_client, fleet_a, retain_activity_days=value)
    assert response.status_code == 200  # the form again, with its error
    assert re.search(r"errorlist", response.content.decode())
    assert Fleet.objects.get(pk=fleet_a.pk).retain_activity_days == (
        retention.RETAIN_ACTIVITY.default_days)


def test_the_admin_saves_an_age(root_client: Client, fleet_a: Fleet) -> None:
    response = _admin_post(root_client, fleet_a, retain_dead_letters_days="14",
                           retain_activity_days="0")
    assert response.status_code == 302, response.content.decode()[:2000]
    fleet = Fleet.objects.get(pk=fleet_a.pk)
    assert (fleet.retain_dead_letters_days, fleet.retain_activity_days) == (14, 0)


# -- doctor and the docs ------------------------------------------------------------------

def test_doctor_shows_table_sizes_and_what_the_next_prune_removes(
    aged: dict[str, Any], fleet_a: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    out = StringIO()
    with contextlib.suppress(CommandError):  # another check may fail here; not the subject
        call_command("doctor", "--json", stdout=out)
    check = next(c for c in json.loads(out.getvalue()) if c["name"] == "retention")
    assert check["data"]["next_prune"][fleet_a.slug] == {
        "activity": 3, "applied_events": 3, "dead_letters": 3, "session_transcripts": 3}
    assert "fleet_fleet" not in check["data"]["tables"]
    assert {"fleet_activity", "fleet_appliedevent", "fleet_deadletter", "fleet_session",
            "claims_claimevent"} == set(check["data"]["tables"])
    assert check["detail"].startswith(
        "next prune removes 3 activity, 3 applied events, 3 dead letters, "
        "3 session transcripts")
    assert "claims_claimevent" in check["detail"] and "never pruned" in check["detail"]
    assert Activity.objects.filter(fleet=fleet_a).count() > 3  # doctor changed nothing


def test_the_docs_give_each_age_its_default() -> None:
    doc = (ROOT / "docs" / "workers.md").read_text()
    for rule in RETENTION:
        assert re.search(rf"`{rule.field}`[^\n]*\| {rule.default_days} \|", doc), rule.field


# -- the workers' task results ------------------------------------------------------------

def _task_result(stopped_ago: timedelta, *, success: bool = True) -> str:
    from django_q.models import Task

    now = timezone.now()
    task_id = uuid.uuid4().hex
    Task.objects.create(id=task_id, name=f"t-{task_id[:6]}", func="math.floor", args=(1.5,),
                        kwargs={}, result=1, started=now - stopped_ago,
                        stopped=now - stopped_ago, success=success, attempt_count=1)
    return task_id


def test_maintain_db_prunes_task_results_past_a_day_and_keeps_failures(
    transactional_db: None,
) -> None:
    from django_q.models import Task

    old, fresh = _task_result(timedelta(days=2)), _task_result(timedelta(hours=2))
    failed = _task_result(timedelta(days=2), success=False)
    out = StringIO()
    call_command("maintain_db", "--json", stdout=out, stderr=StringIO())
    assert json.loads(out.getvalue())["task_results"] == 1
    assert Task.objects.filter(id=old).exists()  # a dry run
    call_command("maintain_db", "--commit", stdout=(out := StringIO()))
    assert "task results: 1 success row(s) older than a day pruned" in out.getvalue()
    assert set(Task.objects.values_list("id", flat=True)) == {fresh, failed}
    _task_result(timedelta(days=3))
    from ctxlake_site import workers

    assert "; 1 task result(s) past a day" in workers.maintain_db_task()


def test_saving_a_task_result_reads_none_of_the_kept_ones(db: None) -> None:
    """django-q2's own bound (save_limit) read every kept success row, under FOR UPDATE,
    to save each new one: with save_limit 0 saving costs the same whatever is kept."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django_q.brokers import get_broker
    from django_q.monitor import save_task

    def saved() -> list[str]:
        now = timezone.now()
        task = {"id": uuid.uuid4().hex, "name": "t", "func": "math.floor", "args": (1.5,),
                "kwargs": {}, "started": now, "stopped": now, "result": 1, "success": True,
                "sync": True}  # sync: it would close the test's connection otherwise
        with CaptureQueriesContext(connection) as run:
            save_task(task, get_broker())
        return [q["sql"] for q in run.captured_queries]

    few = saved()
    for _ in range(30):
        _task_result(timedelta(minutes=5))
    many = saved()
    assert len(few) == len(many)
    assert not any("FOR UPDATE" in sql for sql in many)

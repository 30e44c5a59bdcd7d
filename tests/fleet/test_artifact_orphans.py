"""Collecting the object store's orphans (fleet.artifact_orphans, `manage.py
collect_artifacts`), against moto's S3 server over HTTP (the `s3` fixture,
tests/fleet/s3_store.py), as in test_artifact_store."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from ctxlake_site import workers
from fleet import artifact_orphans, artifact_store, artifacts
from fleet.models import CacheArtifact, Fleet
from tests.fleet.s3_store import ACCESS_KEY, PREFIX, S3, SECRET_KEY
from tests.fleet.s3_store import configure as _configure
from tests.fleet.s3_store import object_key as _key
from tests.helpers import until_an_advisory_lock_is_awaited


def _later() -> Any:
    """A `now` two days ahead: every object listed is past the default grace period."""
    return timezone.now() + timedelta(days=2)


def _rolled_back(fleet: Fleet, body: bytes, name: str = "roster.json") -> str:
    """Publish `body` in a render that rolls back; the key of the upload it leaves."""
    with pytest.raises(RuntimeError), transaction.atomic():
        artifacts.publish(fleet, {name: body}, at=timezone.now())
        raise RuntimeError("the render failed after uploading")
    return _key(fleet, name, body)


def test_it_collects_a_rolled_back_render_s_upload_once_old_enough(
    s3: S3, fleet_a: Fleet
) -> None:
    orphan = _rolled_back(fleet_a, b"rolled back")
    young = artifact_orphans.collect_orphans()  # just uploaded: inside the day's grace
    assert (young.too_young, young.deleted) == (1, 0) and orphan in s3.objects()
    old = artifact_orphans.collect_orphans(now=_later())
    assert (old.listed, old.deleted, old.bytes_freed) == (1, 1, len(b"rolled back"))
    assert orphan not in s3.objects()
    again = artifact_orphans.collect_orphans(older_than=timedelta(0))
    assert (again.listed, again.deleted) == (0, 0)


def test_it_keeps_a_live_head_s_object_and_collects_a_deleted_fleet_s(
    s3: S3, fleet_a: Fleet, fleet_b: Fleet
) -> None:
    artifacts.publish(fleet_a, {"roster.json": b"live"}, at=timezone.now())
    artifacts.publish(fleet_b, {"roster.json": b"gone", "briefing.md": b"gone too"},
                      at=timezone.now())
    gone = {_key(fleet_b, "roster.json", b"gone"), _key(fleet_b, "briefing.md", b"gone too")}
    fleet_b.delete()
    report = artifact_orphans.collect_orphans(now=_later())
    assert (report.listed, report.kept, report.deleted) == (3, 1, 2)
    assert s3.objects() == {_key(fleet_a, "roster.json", b"live")}
    assert not s3.objects() & gone


def test_it_leaves_foreign_keys_and_objects_outside_the_prefix_alone(
    s3: S3, fleet_a: Fleet
) -> None:
    sha = "a" * 64
    foreign = [f"{PREFIX}notes.txt", f"{PREFIX}{fleet_a.pk}/roster.json/abc",
               f"{PREFIX}0{fleet_a.pk}/roster.json/{sha}", f"{PREFIX}x/roster.json/{sha}",
               f"{PREFIX}{fleet_a.pk}/a/b/{sha}"]
    outside = [f"other/{fleet_a.pk}/roster.json/{sha}", f"{fleet_a.pk}/roster.json/{sha}"]
    for key in foreign + outside:
        s3.client().put_object(Bucket=s3.bucket, Key=key, Body=b"not ours")
    report = artifact_orphans.collect_orphans(older_than=timedelta(0), now=_later())
    assert (report.listed, report.foreign, report.deleted) == (len(foreign), len(foreign), 0)
    assert s3.objects() == set(foreign + outside)


def test_it_collects_what_a_render_moved_back_while_the_store_was_off(
    s3: S3, fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    artifacts.publish(fleet_a, {"roster.json": b"moved"}, at=timezone.now())
    _configure(monkeypatch, settings, None)
    artifacts.publish(fleet_a, {"roster.json": b"moved"}, at=timezone.now())  # into Postgres
    _configure(monkeypatch, settings, s3)
    report = artifact_orphans.collect_orphans(now=_later())
    assert report.deleted == 1 and s3.objects() == set()
    assert bytes(CacheArtifact.objects.get(fleet=fleet_a).body) == b"moved"


def test_it_deletes_nothing_in_a_dry_run(s3: S3, fleet_a: Fleet) -> None:
    orphan = _rolled_back(fleet_a, b"orphan")
    report = artifact_orphans.collect_orphans(now=_later(), dry_run=True)
    assert (report.deleted, report.bytes_freed, report.dry_run) == (1, len(b"orphan"), True)
    assert orphan in s3.objects()
    out = io.StringIO()
    call_command("collect_artifacts", "--older-than", "0", "--json", stdout=out)  # no --commit
    assert json.loads(out.getvalue())["deleted"] == 1 and orphan in s3.objects()


@pytest.mark.django_db(transaction=True)
def test_a_render_re_uploading_the_same_key_during_a_collection_keeps_its_object(
    s3: S3, fleet_a: Fleet
) -> None:
    """The render holds the key's lock from its upload to its COMMIT; the collection, which
    saw no committed row, waits on that lock, then sees the row and keeps the object."""
    orphan = _rolled_back(fleet_a, b"back again")
    uploaded, go = threading.Event(), threading.Event()
    reports: list[artifact_orphans.Report] = []

    def render() -> None:
        try:
            with transaction.atomic():
                artifacts.publish(fleet_a, {"roster.json": b"back again"}, at=timezone.now())
                uploaded.set()
                assert go.wait(60)
        finally:
            connection.close()

    def collect() -> None:
        try:
            reports.append(artifact_orphans.collect_orphans(older_than=timedelta(0),
                                                            now=_later()))
        finally:
            connection.close()

    renderer = threading.Thread(target=render)
    renderer.start()
    assert uploaded.wait(60)
    collector = threading.Thread(target=collect)
    collector.start()
    until_an_advisory_lock_is_awaited("the collector")
    go.set()
    renderer.join(60)
    collector.join(60)
    assert len(reports) == 1 and (reports[0].kept, reports[0].deleted) == (1, 0)
    assert orphan in s3.objects()
    assert s3.body(orphan) == b"back again"



def test_a_store_failing_mid_collection_is_counted_and_logged_without_its_keys(
    s3: S3, fleet_a: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(3):
        _rolled_back(fleet_a, b"orphan %d" % n)
    with caplog.at_level(logging.DEBUG):
        report = artifact_orphans.collect_orphans(
            now=_later(), every=1, progress=lambda r: s3.server.stop())
    assert (report.listed, report.deleted, report.failed) == (3, 1, 2) and not report.ok
    assert f"{PREFIX}{fleet_a.pk}/roster.json/" in caplog.text and "left behind" in caplog.text
    assert s3.endpoint.removeprefix("http://") in caplog.text and s3.bucket in caplog.text
    assert ACCESS_KEY not in caplog.text and SECRET_KEY not in caplog.text


def test_the_command_exits_non_zero_when_deletes_fail(
    s3: S3, fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(2):
        _rolled_back(fleet_a, b"orphan %d" % n)
    real = artifact_store.delete_unless_used

    def then_stop(*found: Any) -> bool:  # the store goes down after the first delete
        done = real(*found)
        s3.server.stop()
        return done

    monkeypatch.setattr(artifact_store, "delete_unless_used", then_stop)
    out, err = io.StringIO(), io.StringIO()
    with caplog.at_level(logging.DEBUG), \
            pytest.raises(CommandError, match="1 delete") as failed:
        call_command("collect_artifacts", "--older-than=0", "--commit", "--json", stdout=out,
                     stderr=err)
    assert failed.value.returncode == 1
    assert json.loads(out.getvalue())["failed"] == 1
    for text in (caplog.text, out.getvalue(), err.getvalue()):
        assert ACCESS_KEY not in text and SECRET_KEY not in text


def test_the_command_exits_non_zero_when_the_store_does_not_answer(
    s3: S3, fleet_a: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    _rolled_back(fleet_a, b"orphan")
    s3.server.stop()
    out = io.StringIO()
    with caplog.at_level(logging.DEBUG), \
            pytest.raises(CommandError, match="stopped early.*listing failed") as failed:
        call_command("collect_artifacts", "--commit", "--json", "--quiet", stdout=out)
    assert "127.0.0.1" in str(failed.value) and failed.value.returncode == 1
    assert json.loads(out.getvalue())["incomplete"]
    for text in (caplog.text, str(failed.value), out.getvalue()):
        assert ACCESS_KEY not in text and SECRET_KEY not in text


def test_the_command_collects_and_reports_progress_and_json(
    s3: S3, fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fleet.management.commands.collect_artifacts.PROGRESS_EVERY", 1)
    orphan = _rolled_back(fleet_a, b"orphan")
    artifacts.publish(fleet_a, {"briefing.md": b"live"}, at=timezone.now())
    out, err = io.StringIO(), io.StringIO()
    call_command("collect_artifacts", "--older-than", "0", "--commit", "--json", stdout=out,
                 stderr=err)
    report = json.loads(out.getvalue())
    assert report["configured"] is True
    assert (report["listed"], report["deleted"], report["kept"]) == (2, 1, 1)
    assert "1 object(s) listed" in err.getvalue() and orphan not in s3.objects()
    quiet = io.StringIO()
    call_command("collect_artifacts", "--older-than", "0", "--quiet", stdout=io.StringIO(),
                 stderr=quiet)
    call_command("collect_artifacts", "--older-than", "0", verbosity=0, stdout=io.StringIO(),
                 stderr=quiet)
    assert quiet.getvalue() == ""


def test_without_a_store_the_command_has_nothing_to_do(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    _configure(monkeypatch, settings, None)
    out = io.StringIO()
    call_command("collect_artifacts", stdout=out)
    assert "No object store configured" in out.getvalue()
    out = io.StringIO()
    call_command("collect_artifacts", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"configured": False}


@pytest.mark.parametrize("value", ["-1", "nan", "1e400", "inf", "1\x00", "\ud800", "",
                                   "24h", "87601", "-0.5"])
def test_the_command_refuses_a_hostile_older_than(
    value: str, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    _configure(monkeypatch, settings, None)  # refused before the store is even asked
    with pytest.raises(CommandError, match="--older-than") as refused:
        call_command("collect_artifacts", f"--older-than={value}", stdout=io.StringIO())
    assert "\x00" not in str(refused.value) and "\ud800" not in str(refused.value)


@pytest.mark.django_db(transaction=True)  # the daily job vacuums
def test_the_daily_maintenance_collects_when_a_store_is_configured(
    s3: S3, fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    orphan = _rolled_back(fleet_a, b"orphan")
    young = workers.maintain_db_task()
    assert "object store: 1 object(s) listed: deleted 0" in young and "1 too young" in young
    monkeypatch.setattr(artifact_orphans, "GRACE", timedelta(0))
    summary = workers.maintain_db_task()
    assert "object store: 1 object(s) listed: deleted 1" in summary
    assert orphan not in s3.objects()
    _configure(monkeypatch, settings, None)
    assert "object store" not in workers.maintain_db_task()

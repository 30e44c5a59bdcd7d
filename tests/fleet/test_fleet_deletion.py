"""Deleting a fleet between two of its renders (fleet.deletion).

The two sides run in threads with their own connections and commit for real: a render
holding the fleet's render lock, and the delete that must wait for it instead of failing
on the rows the render commits.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from ctxlake_site import workers
from fleet import artifacts, deletion, locks
from fleet.models import CacheArtifact, CacheHead, Fleet
from mcp_bridge import contract
from tests.helpers import until_an_advisory_lock_is_awaited

pytestmark = pytest.mark.django_db(transaction=True)


def _rows_of(fleet_id: int) -> int:
    return (CacheHead.objects.filter(fleet_id=fleet_id).count()
            + CacheArtifact.objects.filter(fleet_id=fleet_id).count())


def _rendering(fleet: Fleet, locked: threading.Event, go: threading.Event) -> None:
    """A render that holds the lock while the delete starts, then publishes and commits."""
    try:
        with transaction.atomic():
            locks.hold_render_lock(fleet.pk)
            locked.set()
            assert go.wait(60)
            artifacts.publish(fleet, {contract.ROSTER: b'{"agents":["late"]}'},
                              at=timezone.now())
    finally:
        connection.close()


def _deleting(fleet: Fleet) -> int:
    try:
        return deletion.delete_fleet(fleet)
    finally:
        connection.close()


def test_a_delete_waits_for_the_running_render_and_takes_its_rows_too() -> None:
    fleet = Fleet.objects.create(slug="doomed", name="doomed", memory_mode="live")
    workers.render_fleet(fleet)
    pk = fleet.pk
    locked, go = threading.Event(), threading.Event()
    with ThreadPoolExecutor(2) as pool:
        render = pool.submit(_rendering, Fleet.objects.get(pk=pk), locked, go)
        assert locked.wait(60)
        delete = pool.submit(_deleting, Fleet.objects.get(pk=pk))
        until_an_advisory_lock_is_awaited("the delete")  # it queued behind the render
        assert not delete.done()
        go.set()
        render.result(timeout=60)  # the render committed its rows
        assert delete.result(timeout=60) > 0  # and the delete took them with the fleet
    assert not Fleet.objects.filter(pk=pk).exists()
    assert _rows_of(pk) == 0


def test_a_render_of_a_deleted_fleet_publishes_nothing() -> None:
    fleet = Fleet.objects.create(slug="gone", name="gone", memory_mode="live")
    stale = Fleet.objects.get(pk=fleet.pk)  # a render task that loaded it before the delete
    pk = fleet.pk
    deletion.delete_fleet(fleet)
    report = workers.render_fleet(stale)
    assert report.snapshot == "gone" and report.claims == 0
    assert _rows_of(pk) == 0


def test_the_admin_deletes_a_fleet_through_the_same_action(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    fleets = [Fleet.objects.create(slug=f"adm-{i}", name=f"adm {i}") for i in range(3)]
    for fleet in fleets:
        workers.render_fleet(fleet)
    deleted: list[str] = []
    real = deletion.delete_fleet
    monkeypatch.setattr(deletion, "delete_fleet",
                        lambda fleet: deleted.append(fleet.slug) or real(fleet))
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-1234-root"))
    answer = client.post(f"/admin/fleet/fleet/{fleets[0].pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302, answer.content[:500]
    answer = client.post("/admin/fleet/fleet/", {
        "action": "delete_selected", "post": "yes",
        "_selected_action": [str(f.pk) for f in fleets[1:]]})
    assert answer.status_code == 302, answer.content[:500]
    assert deleted == ["adm-0", "adm-1", "adm-2"]
    assert not Fleet.objects.filter(slug__startswith="adm-").exists()

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import transaction

from fleet import rendering
from fleet.models import Fleet


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_render_requests_in_one_transaction_registers_one_callback() -> None:
    fleet = Fleet.objects.create(slug="burst", name="burst")
    other = Fleet.objects.create(slug="other", name="other")
    with transaction.atomic():
        for _ in range(50):
            rendering.request_render(fleet)
        rendering.request_render(other)
        keys = [
            getattr(cb, "ctxlake_key", None)
            for _, cb, _ in transaction.get_connection().run_on_commit
        ]
    assert sorted(keys) == sorted([f"render:{fleet.pk}", f"render:{other.pk}"])


@pytest.mark.django_db(transaction=True)
def test_of_many_requests_one_enqueues_and_a_set_marker_costs_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The render and the embedding pass share mark_pending: the first request sets the
    marker and enqueues; while it stands, a request reads it once and writes nothing."""
    import django_q.tasks
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from claims import tasks

    queued: list[str] = []
    monkeypatch.setattr(django_q.tasks, "async_task",
                        lambda *args, **kw: queued.append(kw["task_name"]))
    fleet = Fleet.objects.create(slug="marked", name="marked")
    cache.delete_many([rendering.pending_key(fleet.pk), tasks.PENDING_KEY])
    try:
        for _ in range(3):
            rendering.request_render(fleet)
            tasks.request_embedding()
        assert queued == [f"render fleet {fleet.pk}", "embed pending claims"]
        with CaptureQueriesContext(connection) as seen:
            rendering.request_render(fleet)
            tasks.request_embedding()
        assert queued == [f"render fleet {fleet.pk}", "embed pending claims"]
        assert [q["sql"].split()[0] for q in seen.captured_queries] == ["SELECT", "SELECT"]
    finally:
        cache.delete_many([rendering.pending_key(fleet.pk), tasks.PENDING_KEY])


@pytest.mark.django_db(transaction=True)
def test_a_render_within_the_gap_waits_it_out_with_its_marker_moved_past_the_wait(
    settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Back-to-back renders of a fleet start RENDER_GAP_SECS apart: the second waits out the
    rest of the gap, its marker still set (the writes of that second join it) and dated when
    it will start (a drain follower does not count it as starved of a worker); then the
    marker is cleared. The first render, and any in sync mode, start at once."""
    from django.core.cache import cache

    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "sync": False}
    fleet = Fleet.objects.create(slug="gapped", name="gapped")
    key = rendering.pending_key(fleet.pk)
    cache.delete_many([key, rendering.started_key(fleet.pk)])
    waits: list[float] = []
    seen_during_wait: list[tuple[object, int]] = []
    # rendering's clock is set by the test, not read from the wall: nothing here depends on
    # how fast this machine runs the cache's statements
    now = [time.time()]
    monkeypatch.setattr(rendering, "time", SimpleNamespace(time=lambda: now[0]))

    def sleep(secs: float) -> None:  # what a follower sees half-way through the wait
        waits.append(secs)
        now[0] += secs / 2
        seen_during_wait.append((cache.get(key), rendering.renders_waiting(longer_than=0.0)))
        now[0] += secs / 2

    try:
        start = now[0]
        cache.set(key, str(start), timeout=60)
        rendering.render_started(fleet.pk, sleep=sleep)
        assert waits == [] and cache.get(key) is None  # the first render: at once

        now[0] = asked = start + 0.25 * rendering.RENDER_GAP_SECS  # a write asks again
        cache.set(key, str(asked), timeout=60)
        rendering.render_started(fleet.pk, sleep=sleep)
        (wait,) = waits
        assert wait == pytest.approx(0.75 * rendering.RENDER_GAP_SECS)
        (marker, starved), = seen_during_wait
        assert float(str(marker)) == pytest.approx(asked + wait)  # dated at its start
        assert starved == 0
        assert cache.get(key) is None

        settings.Q_CLUSTER = {**settings.Q_CLUSTER, "sync": True}
        rendering.render_started(fleet.pk, sleep=sleep)
        assert len(waits) == 1  # sync mode: no worker to hold, no wait
    finally:
        cache.delete_many([key, rendering.started_key(fleet.pk)])


@pytest.mark.django_db(transaction=True)
def test_a_start_stamp_from_the_future_never_stalls_renders_longer_than_the_gap(
    settings: Any,
) -> None:
    from django.core.cache import cache

    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "sync": False}
    fleet = Fleet.objects.create(slug="stepped", name="stepped")
    waits: list[float] = []
    try:
        for stamp in (str(time.time() + 3600), "not a time", "\x00"):
            cache.set(rendering.started_key(fleet.pk), stamp, timeout=60)
            rendering.render_started(fleet.pk, sleep=waits.append)
        assert len(waits) == 1 and waits[0] <= rendering.RENDER_GAP_SECS
    finally:
        cache.delete_many([rendering.pending_key(fleet.pk), rendering.started_key(fleet.pk)])

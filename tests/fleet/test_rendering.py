from __future__ import annotations

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

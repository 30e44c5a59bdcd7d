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

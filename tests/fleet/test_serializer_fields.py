"""fleet.serializers.FieldsBuiltOnce: a model serializer's fields built once per class, the
same answer as DRF's own ModelSerializer, and every instance its own copies to bind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework import serializers

from claims.serializers import ClaimSerializer
from fleet import serializers as s
from fleet.models import Agent, Fleet, Lease

pytestmark = pytest.mark.django_db


class DjangosLeaseSerializer(s.LeaseSerializer):
    """LeaseSerializer with DRF's own get_fields (built for every instance), to compare."""

    def get_fields(self) -> Any:
        return serializers.ModelSerializer.get_fields(self)


def _lease(fleet: Fleet) -> Lease:
    agent = Agent.objects.create(fleet=fleet, agent_id="ada")
    now = timezone.now()
    return Lease.objects.create(fleet=fleet, agent=agent, path="src/a.py", prefix="src/a.py/",
                                reason="edit", acquired_at=now,
                                expires_at=now + timedelta(minutes=5))


def test_fields_are_built_once_per_class_and_copied_per_instance(
    fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = _lease(fleet_a)
    builds: list[type[Any]] = []
    own = serializers.ModelSerializer.get_fields

    def counting(self: serializers.ModelSerializer[Any]) -> Any:
        builds.append(type(self))
        return own(self)

    monkeypatch.setattr(serializers.ModelSerializer, "get_fields", counting)
    monkeypatch.delattr(s.LeaseSerializer, "_fields_built", raising=False)
    first, second = s.LeaseSerializer(lease), s.LeaseSerializer(lease)
    assert first.data == second.data == DjangosLeaseSerializer(lease).data
    assert builds.count(s.LeaseSerializer) == 1
    # each instance binds its own field objects (a field's parent is its serializer)
    assert first.fields["path"] is not second.fields["path"]
    assert first.fields["path"].parent is first and second.fields["path"].parent is second


def test_a_subclass_builds_its_own_fields(fleet_a: Fleet) -> None:
    """RankedClaimSerializer adds fields to ClaimSerializer: neither sees the other's."""
    from claims.serializers import RankedClaimSerializer

    ClaimSerializer()  # builds and keeps ClaimSerializer's fields first
    assert set(RankedClaimSerializer().fields) - set(ClaimSerializer().fields)
    assert set(ClaimSerializer().fields) == set(ClaimSerializer.Meta.fields)

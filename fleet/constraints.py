"""Small builders for the check constraints every app's models declare."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


def in_choices(field: str, choices: type[models.TextChoices], name: str) -> models.CheckConstraint:
    """The column holds one of the enumeration's values — enforced by the database."""
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


def not_blank(field: str, name: str) -> models.CheckConstraint:
    return models.CheckConstraint(condition=~Q(**{field: ""}), name=name)

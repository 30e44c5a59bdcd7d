"""Small builders for the choices and check constraints every app's models declare."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from django.db import models
from django.db.models import Q


def in_choices(field: str, choices: type[models.TextChoices], name: str) -> models.CheckConstraint:
    """The column holds one of the enumeration's values — enforced by the database."""
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


def not_blank(field: str, name: str) -> models.CheckConstraint:
    return models.CheckConstraint(condition=~Q(**{field: ""}), name=name)


def contract_choices(name: str, values: Iterable[str], *,
                     blank: str | None = None) -> type[models.TextChoices]:
    """Django choices made from one of the contract's lists, so the bridge's checks, the
    database's constraint and the admin's forms accept the same values (a value added to
    the contract needs no edit here). Members are the values upper-cased, labels the
    values with spaces for underscores; `blank` adds "" with that label first."""
    members = [("UNKNOWN", ("", blank))] if blank is not None else []
    members += [(v.upper(), (v, v.replace("_", " "))) for v in values]
    # mypy understands the functional enum API only for the stdlib's Enum, not TextChoices.
    choices = models.TextChoices(name, members)  # type: ignore[call-overload]
    return cast("type[models.TextChoices]", choices)

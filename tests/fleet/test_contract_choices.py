"""The models' enumerations are the contract's lists: a value the bridge accepts is one the
database accepts, and the other way round."""

from __future__ import annotations

import pytest
from django.db import models

from claims.models import ClaimExtractor, ClaimType
from fleet.models import HandoffStatus, SessionOutcome
from mcp_bridge.contract import events as ev


@pytest.mark.parametrize(("choices", "contract", "blank"), [
    (ClaimType, ev.CLAIM_TYPES, False),
    (HandoffStatus, ev.HANDOFF_STATUSES, False),
    (SessionOutcome, ev.SESSION_OUTCOMES, True),
    (ClaimExtractor, ev.CAPTURE_EXTRACTORS, True),
])
def test_each_enumeration_is_the_contracts_list(choices: type[models.TextChoices],
                                                contract: tuple[str, ...], blank: bool) -> None:
    assert list(choices.values) == ([""] if blank else []) + list(contract)


def test_members_and_labels_read_as_before() -> None:
    assert HandoffStatus.IN_PROGRESS == "in_progress"
    assert HandoffStatus.IN_PROGRESS.label == "in progress"
    assert SessionOutcome.UNKNOWN == "" and SessionOutcome.UNKNOWN.label == "unknown"
    assert ClaimType.GOTCHA == "gotcha"

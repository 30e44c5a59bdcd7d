"""fleet.column_update writes what Django's bulk_update writes, in one statement.

The same changes go to two fleets' claims, one through each, and every column read back
is compared: vectors, a foreign key, floats, text (awkward characters included) and NULLs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from claims.models import Claim
from fleet.column_update import update_columns
from fleet.models import Fleet
from mcp_bridge.contract import embed

pytestmark = pytest.mark.django_db

FIELDS = ["embedding", "embedding_model", "near_claim", "near_similarity", "near_relation"]
AWKWARD = "tab\there\nnew 'quote' \"dq\" \\N é 漢 🙂"


def _claims(fleet: Fleet) -> list[Claim]:
    return Claim.objects.bulk_create(
        Claim(fleet=fleet, number=i + 1, text=f"claim {i}", text_hash=f"{i:064d}",
              type="fact", subject="s")
        for i in range(6)
    )


def _change(claims: list[Claim]) -> None:
    rng = np.random.default_rng(7)
    for i, claim in enumerate(claims):
        last = i == len(claims) - 1  # back to NULL everywhere
        vector = rng.standard_normal(embed.DIMS).astype("float32")
        claim.embedding = None if last else vector / np.linalg.norm(vector)
        claim.embedding_model = "" if last else f"model {AWKWARD}"
        claim.near_claim = None if last or i == 0 else claims[0]
        claim.near_similarity = None if last else 0.1234 * i - 0.3
        claim.near_relation = "" if last else ("duplicate", "conflict")[i % 2]


def _read(fleet: Fleet) -> list[dict[str, Any]]:
    rows = Claim.objects.filter(fleet=fleet).order_by("number").values(
        "number", "embedding", "embedding_model", "near_claim__number", "near_similarity",
        "near_relation")
    return [{k: (None if v is None else np.asarray(v).tolist()) if k == "embedding" else v
             for k, v in row.items()} for row in rows]


def test_it_writes_what_bulk_update_writes_in_one_statement(
    fleet_a: Fleet, fleet_b: Fleet
) -> None:
    ours, django = _claims(fleet_a), _claims(fleet_b)
    for claims in (ours, django):
        claims[-1].embedding = np.ones(embed.DIMS, dtype="float32") / embed.DIMS ** 0.5
        claims[-1].near_relation = "duplicate"
        Claim.objects.bulk_update(claims, ["embedding", "near_relation"])
        _change(claims)
    with CaptureQueriesContext(connection) as sent:
        assert update_columns(ours, FIELDS) == len(ours)
    assert len(sent.captured_queries) == 1
    Claim.objects.bulk_update(django, FIELDS)
    assert _read(fleet_a) == _read(fleet_b)
    assert _read(fleet_a)[-1]["embedding"] is None  # a NULL written over a value


def test_nothing_to_write_sends_nothing(fleet_a: Fleet) -> None:
    with CaptureQueriesContext(connection) as sent:
        assert update_columns([], FIELDS) == 0
    assert sent.captured_queries == []


@pytest.mark.parametrize("name", ["evidence", "events"])
def test_a_name_that_is_no_column_of_the_table_is_refused(fleet_a: Fleet, name: str) -> None:
    """A reverse relation has no column here: a clear error, nothing sent."""
    claims = _claims(fleet_a)
    with CaptureQueriesContext(connection) as sent, \
            pytest.raises(ValueError, match=f"{name} is not a column"):
        update_columns(claims, [name])
    assert sent.captured_queries == []

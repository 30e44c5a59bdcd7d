"""Bulk inserts through COPY (fleet.copy_insert) leave what Django's INSERT leaves.

Each test inserts the same objects both ways, into two fleets, and compares every column
read back; then the edges: triggers, constraint errors as Django's, text that COPY's
format must escape, the small and expression cases that stay on Django's path.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from django.db import DataError, IntegrityError, connection, models, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from claims.models import Claim, ClaimEvent, ClaimTerm, Evidence, SnapshotChange
from fleet import copy_insert
from fleet.copy_insert import COPY_MIN_ROWS
from fleet.models import Agent, Fleet, Handoff
from mcp_bridge.contract import embed

pytestmark = pytest.mark.django_db

N = COPY_MIN_ROWS + 3
WHEN = datetime(2026, 12, 5, 7, 30, tzinfo=UTC)
# Text COPY's format must escape: tab, newline, carriage return, backslash, "\N" (its
# NULL), a lone quote, and characters outside ASCII and the BMP.
AWKWARD = "tab\there\nnew line\r\\ back\\slash \\N not null 'quote' \"dq\" é 漢 🙂"


def _claims(fleet: Fleet, agent: Agent, n: int = N, *, status: str = "proposed") -> list[Claim]:
    vector = np.linspace(-1, 1, embed.DIMS).astype("float32")
    return [
        Claim(fleet=fleet, number=i + 1, text=f"{AWKWARD} {i}", text_hash=f"{i:064d}",
              type="fact", subject=f"s{i % 3}", status=status,
              scope="fleet" if status == "promoted" else "agent",
              promoted_at=timezone.now() if status == "promoted" else None,
              proposed_by=agent, confidence=0.25, independent_sessions=i,
              embedding=vector if i % 2 else None, embedding_model="m" if i % 2 else "",
              screen_flags={"text": ["a flag"]} if i % 5 == 0 else {},
              valid_until=WHEN if i % 7 == 0 else None)
        for i in range(n)
    ]


def _values(qs: models.QuerySet[Any], drop: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for row in qs.values():
        for name in ("id", "fleet_id", *drop):
            row.pop(name, None)
        rows.append({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()})
    return rows


def _inserts(make: Callable[[], list[Any]], model: type[models.Model],
             monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Insert make()'s objects through the same bulk_create, kept on Django's INSERT."""
    with monkeypatch.context() as patch:
        patch.setattr(copy_insert, "COPY_MIN_ROWS", 10**9)
        return model._default_manager.bulk_create(make())


def _copies(make: Callable[[], list[Any]], model: type[models.Model]) -> list[Any]:
    """Insert make()'s objects through the COPY path, checking that it was the path taken."""
    objs = make()
    with CaptureQueriesContext(connection) as seen:
        made = model._default_manager.bulk_create(objs)
    assert any("generate_series" in q["sql"] for q in seen.captured_queries)
    assert any(q["sql"].startswith(f'COPY "{model._meta.db_table}"')  # logged as Django's
               for q in seen.captured_queries)
    assert not any(q["sql"].startswith(f'INSERT INTO "{model._meta.db_table}"')
                   for q in seen.captured_queries)
    return made


def test_claims_copied_equal_claims_inserted_column_for_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    b = Fleet.objects.create(slug="inserted", name="inserted")
    ada, bo = (Agent.objects.create(fleet=f, agent_id="ada") for f in (a, b))
    copied = _copies(lambda: _claims(a, ada), Claim)
    _inserts(lambda: _claims(b, bo), Claim, monkeypatch)
    assert all(c.pk and not c._state.adding for c in copied)
    assert [c.pk for c in copied] == sorted(c.pk for c in copied)  # in the order given
    drop = ("proposed_by_id", "created_at")
    got, want = (_values(Claim.objects.filter(fleet=f).order_by("number"), drop)
                 for f in (a, b))
    assert got == want and len(got) == N
    # the generated search vector was computed from the copied text, and terms were cut
    assert Claim.objects.filter(fleet=a, search_vector="slash").count() == N
    copied_terms, inserted_terms = (
        set(ClaimTerm.objects.filter(claim__fleet=f).values_list(
            "claim__number", "term", "text_count", "subject_count", "length"))
        for f in (a, b)
    )
    assert copied_terms == inserted_terms and len(copied_terms) > N
    assert Claim.objects.get(pk=copied[3].pk).text == f"{AWKWARD} 3"
    # a generated column is not set by COPY: it loads on first access, as a deferred field
    assert "search_vector" in copied[3].get_deferred_fields()
    assert "slash" in copied[3].search_vector


def test_evidence_events_and_handoffs_copied_equal_inserted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    claims = Claim.objects.bulk_create(_claims(a, ada))

    batches = iter(range(2))

    def evidence() -> list[Evidence]:  # a citation is unique per claim: a new session each
        session = f"s-{next(batches)}"
        return [Evidence(claim=c, session_id=session, message_id=f"m-{i}", excerpt=AWKWARD)
                for i, c in enumerate(claims)]

    def events() -> list[ClaimEvent]:
        return [ClaimEvent(claim=c, kind="proposed", actor_agent=ada, note=AWKWARD,
                           data={"n": i, "deep": [{"x": AWKWARD}]})
                for i, c in enumerate(claims)]

    def handoffs() -> list[Handoff]:
        return [Handoff(fleet=a, from_agent=ada, summary=f"{AWKWARD} {i}", next_steps="go on")
                for i in range(N)]

    for make, model in ((evidence, Evidence), (events, ClaimEvent), (handoffs, Handoff)):
        copied = _copies(make, model)
        qs = model._default_manager.filter(pk__in=[o.pk for o in copied]).order_by("pk")
        drop = ("created_at", "at", "updated_at", "session_id")
        first = _values(qs, drop)
        inserted = _inserts(make, model, monkeypatch)
        qs = model._default_manager.filter(pk__in=[o.pk for o in inserted]).order_by("pk")
        assert _values(qs, drop) == first, model
        assert len(first) == N


def test_copied_rows_fire_the_snapshot_triggers() -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    claims = _copies(lambda: _claims(a, ada, status="promoted"), Claim)
    noted = set(SnapshotChange.objects.filter(fleet_id=a.pk).values_list("claim_id", flat=True))
    assert noted == {c.pk for c in claims}
    SnapshotChange.objects.filter(fleet_id=a.pk).delete()
    _copies(lambda: [Evidence(claim=c, session_id="s", message_id="m") for c in claims],
            Evidence)
    assert SnapshotChange.objects.filter(fleet_id=a.pk).count() == N  # the statement trigger


def test_a_constraint_violation_is_djangos_integrity_error_and_writes_nothing() -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    twice = _claims(a, ada)
    twice[-1].number = 1  # the fleet's claim numbers are unique
    with pytest.raises(IntegrityError), transaction.atomic():
        Claim.objects.bulk_create(twice)
    assert not Claim.objects.filter(fleet=a).exists()


def test_a_nul_byte_is_refused_as_djangos_error_and_writes_nothing() -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    claims = _claims(a, ada)
    claims[5].text = "nul \x00 inside"
    with pytest.raises((DataError, ValueError)), transaction.atomic():
        Claim.objects.bulk_create(claims)
    assert not Claim.objects.filter(fleet=a).exists()


def test_small_batches_and_expressions_stay_on_djangos_insert() -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    claims = Claim.objects.bulk_create(_claims(a, ada))
    few = [ClaimEvent(claim=c, kind="proposed") for c in claims[: COPY_MIN_ROWS - 1]]
    with CaptureQueriesContext(connection) as seen:
        ClaimEvent.objects.bulk_create(few)
    assert len(seen.captured_queries) == 1
    assert seen.captured_queries[0]["sql"].startswith('INSERT INTO "claims_claimevent"')
    assert all(e.pk for e in few)
    # a database expression as a value: COPY cannot send it, Django's INSERT can
    stamped = [ClaimEvent(claim=c, kind="proposed", at=Now()) for c in claims]
    with CaptureQueriesContext(connection) as seen:
        ClaimEvent.objects.bulk_create(stamped)
    assert any(q["sql"].startswith('INSERT INTO "claims_claimevent"')
               for q in seen.captured_queries)
    assert ClaimEvent.objects.filter(pk__in=[e.pk for e in stamped]).count() == N


@pytest.mark.parametrize("copy_from", [COPY_MIN_ROWS, 10**9], ids=["copy", "insert"])
def test_a_lone_surrogate_fails_the_copy_as_it_fails_an_insert_and_the_connection_recovers(
    copy_from: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(copy_insert, "COPY_MIN_ROWS", copy_from)
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    claims = _claims(a, ada)
    claims[-1].text = "half a pair \ud800"  # fails mid-stream, after rows went out
    with pytest.raises(UnicodeEncodeError), transaction.atomic():
        Claim.objects.bulk_create(claims)
    assert not Claim.objects.filter(fleet=a).exists()  # the same connection, usable
    assert len(Claim.objects.bulk_create(_claims(a, ada))) == N


def test_a_role_without_the_sequence_grant_gets_djangos_insert() -> None:
    """An app role with table grants only (migrations run by another role) may insert
    through the identity column's default but not draw ids with nextval(): its large
    batches go through Django's INSERT instead of failing."""
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    claims = Claim.objects.bulk_create(_claims(a, ada))
    with connection.cursor() as cur:
        cur.execute("CREATE ROLE ctxlake_tables_only NOLOGIN")
        cur.execute("GRANT USAGE ON SCHEMA public TO ctxlake_tables_only")
        cur.execute("GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO ctxlake_tables_only")
        cur.execute("SET LOCAL ROLE ctxlake_tables_only")
    try:
        events = [ClaimEvent(claim=c, kind="proposed", note=AWKWARD) for c in claims]
        with CaptureQueriesContext(connection) as seen:
            ClaimEvent.objects.bulk_create(events)
        statements = [q["sql"].split()[0] for q in seen.captured_queries]
        assert statements == ["WITH", "INSERT"]  # no ids drawn, then Django's INSERT
        assert all(e.pk and not e._state.adding for e in events)
        assert ClaimEvent.objects.filter(pk__in=[e.pk for e in events], note=AWKWARD).count() == N
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET ROLE")
    # the owner still copies
    _copies(lambda: [ClaimEvent(claim=c, kind="proposed") for c in claims], ClaimEvent)


def test_batch_size_is_checked_as_django_checks_it() -> None:
    a = Fleet.objects.create(slug="copied", name="copied")
    ada = Agent.objects.create(fleet=a, agent_id="ada")
    for size in (0, -1):
        with pytest.raises(ValueError, match="Batch size"), transaction.atomic():
            Claim.objects.bulk_create(_claims(a, ada), batch_size=size)
    assert len(Claim.objects.bulk_create(_claims(a, ada), batch_size=5)) == N

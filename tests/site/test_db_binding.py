"""ctxlake_site.pooled_pg.binding: statements bound and prepared on the server, and the two
kinds that binding cannot carry, against this run's real Postgres.

The third kind, an integer too wide for its column, is tests/site/test_retirement.py's
`test_the_window_is_validated_and_constrained[10**20]`: Postgres refuses it (DataError) as
it did with client-side binding, where binary binding raised OverflowError in Python.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from ctxlake_site.pooled_pg.binding import MAX_BOUND_PARAMS, BindingCursor
from fleet.models import Agent, Fleet

pytestmark = pytest.mark.django_db


def _prepared_on_this_connection(table: str) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                    [f'%"{table}"%'])
        return int(cur.fetchone()[0])


def test_a_repeated_statement_is_prepared_once_on_the_server(fleet_a: Fleet) -> None:
    """The settings' default: after `prepare_threshold` runs of one ORM query, Postgres
    holds it prepared, whatever values each run binds."""
    assert settings.CTXLAKE_DB_PREPARE > 0
    connection.ensure_connection()
    assert isinstance(connection.connection.cursor(), BindingCursor)
    before = _prepared_on_this_connection("fleet_agent")
    for i in range(settings.CTXLAKE_DB_PREPARE + 1):
        assert not Agent.objects.filter(fleet=fleet_a, agent_id=f"nobody-{i}").exists()
    assert _prepared_on_this_connection("fleet_agent") == before + 1


def test_more_parameters_than_binding_carries_are_sent_as_text(fleet_a: Fleet) -> None:
    """Django bounds neither an `__in` list nor a bulk INSERT by the protocol's 16-bit
    parameter count; both run, as they did with client-side binding."""
    many = range(1, MAX_BOUND_PARAMS + 2)
    assert Agent.objects.filter(pk__in=many).exclude(fleet=fleet_a).count() == 0

    agents = [Agent(fleet=fleet_a, agent_id=f"bulk-{i}") for i in range(10_000)]
    fields = len([f for f in Agent._meta.concrete_fields if not f.primary_key])
    assert len(agents) * fields > MAX_BOUND_PARAMS  # one statement, Django's own path
    Agent.objects.bulk_create(agents, ignore_conflicts=True)
    assert Agent.objects.filter(fleet=fleet_a, agent_id__startswith="bulk-").count() == 10_000


def test_prepare_zero_keeps_djangos_default_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxlake_site import settings as site

    config = {"ENGINE": "ctxlake_site.pooled_pg", "OPTIONS": {"sslmode": "require"}}
    assert site._prepared(config)["OPTIONS"] == {
        "sslmode": "require", "server_side_binding": True,
        "prepare_threshold": site.CTXLAKE_DB_PREPARE}
    monkeypatch.setattr(site, "CTXLAKE_DB_PREPARE", 0)
    assert site._prepared(config) == config

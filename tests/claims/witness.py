"""Make sessions real for a test: the fleet has seen them, from one of its agents.

Only such sessions count as independent (fleet.lineage); a test whose claims should pass
the gate says which sessions the fleet saw, as the drain or the session hooks would have.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.utils import timezone

from fleet.models import Agent, Fleet
from fleet.sessions import note_sessions_seen


def seen(fleet: Fleet, *session_ids: str, agent: Agent | None = None) -> None:
    if agent is None:
        agent = Agent.objects.get_or_create(fleet=fleet, agent_id="witness")[0]
    now = timezone.now()
    note_sessions_seen(fleet, {sid: (agent, now, now) for sid in session_ids})


def seen_cited(fleet: Fleet, evidence: Iterable[Any], agent: Agent | None = None) -> None:
    """Every session `evidence` cites has been seen by `fleet` (malformed items skipped:
    the tests of bad evidence need them to reach the code under test)."""
    ids = {str(e["session_id"]) for e in evidence if isinstance(e, Mapping) and e.get("session_id")}
    seen(fleet, *ids, agent=agent)

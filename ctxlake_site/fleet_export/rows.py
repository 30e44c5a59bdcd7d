"""A fleet's rows as exported dicts: natural keys instead of database ids, never a secret.

Agents are named by agent_id, sessions by session_id, claims by their public id (cc-07),
handoffs by their position in the export; people (moderators, token owners) only by name.
API tokens' hashes, users' password hashes, the rate-limit and drain bookkeeping are not
read here at all. Each function reads set-wise (one query per file), in a stable order,
so exporting the same rows twice gives the same lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from claims.models import Claim, ClaimEvent, Evidence
from ctxlake_site.fleet_export.layout import instant
from fleet.models import Agent, Fleet, Handoff, Session

#: Where an import keeps the names of a person or token that acted in the source fleet
#: (they are never bound to this server's users: a name is not an identity).
IMPORTED_ACTOR = "imported_actor"

FLEET_FIELDS = ("slug", "name", "memory_mode", "capture_mode", "capture_max_candidates",
                "default_lease_ttl_secs", "min_independent_sessions", "repo_url_template")


def fleet_row(fleet: Fleet) -> dict[str, Any]:
    """The fleet's settings (its claim counter is derived from the claims on import)."""
    return {**{f: getattr(fleet, f) for f in FLEET_FIELDS},
            "created_at": instant(fleet.created_at)}


def agent_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    for a in Agent.objects.filter(fleet=fleet).order_by("agent_id"):
        yield {"agent_id": a.agent_id, "runtime": a.runtime, "host": a.host,
               "last_seen_at": instant(a.last_seen_at), "created_at": instant(a.created_at)}


def session_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    """Sessions without `capture_withheld` (moderator-only capture leftovers, not memory)."""
    qs = Session.objects.filter(fleet=fleet).select_related("agent").order_by("session_id")
    for s in qs:
        yield {"session_id": s.session_id, "agent": s.agent.agent_id, "repo": s.repo,
               "branch": s.branch, "outcome": s.outcome, "summary": s.summary,
               "changed_paths": s.changed_paths, "started_at": instant(s.started_at),
               "ended_at": instant(s.ended_at), "first_seen_at": instant(s.first_seen_at),
               "last_seen_at": instant(s.last_seen_at)}


def handoff_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    """Handoffs oldest first; `ref` is the position (ids are the database's, not data)."""
    qs = Handoff.objects.filter(fleet=fleet).order_by("created_at", "id").values(
        "summary", "status", "next_steps", "source_trust", "state", "picked_up_at",
        "created_at", "updated_at", "from_agent__agent_id", "from_session__session_id",
        "picked_up_by__agent_id", "picked_up_session__session_id")
    for ref, h in enumerate(qs, start=1):
        yield {"ref": ref, "from_agent": h["from_agent__agent_id"],
               "from_session": h["from_session__session_id"], "summary": h["summary"],
               "status": h["status"], "next_steps": h["next_steps"],
               "source_trust": h["source_trust"], "state": h["state"],
               "picked_up_by": h["picked_up_by__agent_id"],
               "picked_up_session": h["picked_up_session__session_id"],
               "picked_up_at": instant(h["picked_up_at"]),
               "created_at": instant(h["created_at"]), "updated_at": instant(h["updated_at"])}


def public_id(number: int | None) -> str | None:
    return None if number is None else f"cc-{number:02d}"


def claim_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    qs = Claim.objects.filter(fleet=fleet).order_by("number").values(
        "number", "text", "type", "subject", "scope", "status", "contested", "confidence",
        "staleness", "independent_sessions", "extractor", "created_at", "promoted_at",
        "valid_until", "proposed_by__agent_id", "superseded_by__number")
    for c in qs.iterator(chunk_size=2000):
        yield {"id": public_id(c["number"]), "text": c["text"], "type": c["type"],
               "subject": c["subject"], "scope": c["scope"], "status": c["status"],
               "contested": c["contested"], "confidence": c["confidence"],
               "staleness": c["staleness"], "independent_sessions": c["independent_sessions"],
               "extractor": c["extractor"], "proposed_by": c["proposed_by__agent_id"],
               "superseded_by": public_id(c["superseded_by__number"]),
               "created_at": instant(c["created_at"]), "promoted_at": instant(c["promoted_at"]),
               "valid_until": instant(c["valid_until"])}


def evidence_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    qs = Evidence.objects.filter(claim__fleet=fleet).order_by(
        "claim__number", "session_id", "message_id").values(
        "claim__number", "session_id", "message_id", "agent__agent_id", "repo", "path",
        "commit", "excerpt", "created_at")
    for e in qs.iterator(chunk_size=2000):
        yield {"claim": public_id(e["claim__number"]), "session_id": e["session_id"],
               "message_id": e["message_id"], "agent": e["agent__agent_id"], "repo": e["repo"],
               "path": e["path"], "commit": e["commit"], "excerpt": e["excerpt"],
               "created_at": instant(e["created_at"])}


def event_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    """Every claim event, in each claim's order; the actor by name (user, agent, token)."""
    qs = ClaimEvent.objects.filter(claim__fleet=fleet).order_by("claim__number", "at", "id")
    values = qs.values("claim__number", "kind", "note", "data", "at", "actor_user__username",
                       "actor_agent__agent_id", "actor_token__name")
    for e in values.iterator(chunk_size=2000):
        data = dict(e["data"] or {})
        earlier = data.pop(IMPORTED_ACTOR, None) or {}  # names an earlier import kept
        actor = {"user": e["actor_user__username"] or earlier.get("user"),
                 "agent": e["actor_agent__agent_id"],
                 "token": e["actor_token__name"] or earlier.get("token")}
        yield {"claim": public_id(e["claim__number"]), "kind": e["kind"], "actor": actor,
               "note": e["note"], "data": data, "at": instant(e["at"])}


def vector_rows(fleet: Fleet) -> Iterator[dict[str, Any]]:
    """Embeddings, only on request (`--with-vectors`): 384 floats a claim add up."""
    qs = Claim.objects.filter(fleet=fleet, embedding__isnull=False).order_by("number")
    for c in qs.values("number", "embedding_model", "embedding").iterator(chunk_size=1000):
        yield {"claim": public_id(c["number"]), "model": c["embedding_model"],
               "embedding": [float(x) for x in c["embedding"] or []]}

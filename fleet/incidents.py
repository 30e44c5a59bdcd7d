"""Incidents: one agent stepping on another's work, kept and told to the other holder.

Leases are advisory, so nothing here refuses anything: an edit inside another agent's
lease, a refused handoff pickup, an overlap that outlives OVERLAP_PATIENCE and an idle
agent's retirement each become one Incident row, through `record_incident` alone (one
transaction with its Activity row, a render request, and the fleet's webhook queued for
after the commit). The render lists a holder's recent incidents in its roster entry; its
bridge tells it once, in its next tool answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet import activity, leases, rendering
from fleet.models import Agent, Fleet, Incident, Lease, Session
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import redact, sanitize

#: Two agents' live leases overlapping this long is an incident (once per pair of leases).
OVERLAP_PATIENCE = timedelta(minutes=15)
#: How far back the roster and the briefing list incidents.
RECENT = timedelta(hours=24)
#: The same intrusion (actor, holder, tool, paths) again within this is the same incident:
#: an agent editing one file ten times in a row tells the holder once.
INTRUSION_REPEAT = timedelta(hours=1)
VERB = "incident.recorded"


def ref(pk: int) -> str:
    """How agents see an incident's id ("i-12")."""
    return f"i-{pk}"


def clean_detail(text: str) -> str:
    """An incident's detail as it is stored: secrets scrubbed, hiding code points, NUL and
    lone surrogates gone, bounded (marker included) to the column."""
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    limit = ev.INCIDENT_DETAIL_MAX_CHARS - len(sanitize.TRUNCATED)
    return sanitize.clean_text(redact.scrub_text(text.strip()), limit)


def open_session(agent: Agent | None) -> str:
    """The agent's latest open session id ("" if none): the holder's side of an incident."""
    if agent is None:
        return ""
    found = (Session.objects.filter(agent=agent, ended_at__isnull=True)
             .order_by("-started_at").values_list("session_id", flat=True).first())
    return found or ""


def record_incident(
    fleet: Fleet, kind: str, *, actor: Agent, paths: Sequence[str] = (),
    holder: Agent | None = None, actor_session: str = "", holder_session: str | None = None,
    detail: str = "", at: datetime | None = None, key: str = "",
) -> Incident:
    """Record one incident, or return the one already recorded under `key`.

    1. A savepoint: a duplicate `key` (two overlap scans racing) rolls back only this
       insert, never the caller's transaction (the drain's batch).
    2. The Activity row and the render request ride the same transaction.
    3. The webhook is queued after COMMIT (fleet.webhooks), so a slow receiver never
       holds a drain's transaction open.
    """
    if key:
        existing = Incident.objects.filter(fleet=fleet, key=key).first()
        if existing is not None:
            return existing
    row = Incident(
        fleet=fleet, kind=kind, actor=actor, holder=holder, key=key,
        paths=list(dict.fromkeys(paths))[:ev.PATHS_MAX], actor_session=actor_session,
        holder_session=open_session(holder) if holder_session is None else holder_session,
        detail=clean_detail(detail), at=at or timezone.now(),
        webhook_next_at=timezone.now() if fleet.incident_webhook_url else None,
    )
    try:
        with transaction.atomic():
            row.save()
            activity.record(fleet, VERB, target=row, agent=actor, kind=kind,
                            holder=holder.agent_id if holder else None, paths=row.paths)
    except IntegrityError:
        if not key:
            raise
        return Incident.objects.get(fleet=fleet, key=key)
    rendering.request_render(fleet)
    if row.webhook_next_at is not None:
        _queue_webhook(row.pk)
    return row


def _queue_webhook(incident_id: int) -> None:
    """Enqueue the first delivery after COMMIT (robust: a broker hiccup is logged, never
    raised into the write); fleet.webhooks retries on the every-minute schedule."""
    from django_q.tasks import async_task

    rendering.on_commit_once(
        f"incident-webhook:{incident_id}",
        lambda: async_task("fleet.webhooks.deliver", incident_id,
                           task_name=f"incident webhook {incident_id}"))


def record_intrusion(fleet: Fleet, *, actor: Agent, holder: Agent, tool: str,
                     paths: Sequence[str], actor_session: str, at: datetime) -> Incident:
    """An edit or commit the PreToolUse hook warned about; a repeat within INTRUSION_REPEAT
    (same actor, holder, tool and paths) is the incident already recorded."""
    kind = ev.INTRUSION_INCIDENT[tool]
    paths = sorted(dict.fromkeys(paths))
    repeat = Incident.objects.filter(fleet=fleet, kind=kind, actor=actor, holder=holder,
                                     paths=paths, at__gte=at - INTRUSION_REPEAT).first()
    if repeat is not None:
        return repeat
    return record_incident(fleet, kind, actor=actor, holder=holder, paths=paths,
                           actor_session=actor_session, at=at)


def record_refused_pickup(fleet: Fleet, *, actor: Agent, actor_session: str, holder: Agent | None,
                          reason: str) -> Incident:
    """A handoff pickup the server refused; `holder` is whoever holds the handoff (its
    taker once picked up, else its author)."""
    return record_incident(fleet, ev.INCIDENT_PICKUP_REFUSED, actor=actor, holder=holder,
                           actor_session=actor_session, detail=reason)


def record_retirement(agent: Agent, *, released: Sequence[str], at: datetime) -> Incident:
    """An idle agent retired (fleet.retirement), naming the leases it let go."""
    return record_incident(agent.fleet, ev.INCIDENT_RETIRED, actor=agent, paths=released,
                           actor_session=open_session(agent), holder_session="", at=at,
                           detail=f"idle for over {agent.fleet.retire_idle_hours} h",
                           key=f"retired:{agent.pk}:{at.isoformat()}")


def mark_told(fleet: Fleet, *, holder: Agent, pks: Sequence[int], at: datetime) -> int:
    """Note when the holder's bridge first showed these incidents (only its own, only the
    first time); returns how many were marked."""
    return Incident.objects.filter(fleet=fleet, holder=holder, pk__in=pks,
                                   told_at__isnull=True).update(told_at=at)


def scan_overlaps(now: datetime) -> list[Incident]:
    """Record each pair of live leases of two agents that has overlapped for at least
    OVERLAP_PATIENCE, once per pair (its key names both leases; a renewal keeps a lease's
    row, a new claim after a release makes a new pair); returns the new incidents. The
    holder who came later is the actor."""
    found = []
    for fleet in Fleet.objects.filter(leases__in=Lease.objects.active(at=now)).distinct():
        pairs = leases.contended_pairs(fleet.pk, now=now)
        rows = Lease.objects.select_related("agent").in_bulk({pk for p in pairs for pk in p})
        ripe = {}
        for a, b in pairs:
            first, then = sorted((rows[a], rows[b]), key=lambda ls: (ls.acquired_at, ls.pk))
            if now - then.acquired_at >= OVERLAP_PATIENCE:
                ripe[f"overlap:{first.pk}:{then.pk}"] = (first, then)
        known = set(Incident.objects.filter(fleet=fleet, key__in=ripe)
                    .values_list("key", flat=True))
        found += [_overlap(fleet, first, then, now, key)
                  for key, (first, then) in ripe.items() if key not in known]
    return found


def _overlap(fleet: Fleet, first: Lease, then: Lease, now: datetime, key: str) -> Incident:
    return record_incident(
        fleet, ev.INCIDENT_OVERLAP, actor=then.agent, holder=first.agent,
        paths=[then.path, first.path], actor_session=open_session(then.agent), at=now,
        detail=f"overlapping since {then.acquired_at:%Y-%m-%d %H:%M}Z", key=key,
    )


def as_json(incident: Incident) -> dict[str, Any]:
    """The one outside shape of an incident: the webhook's body and the REST answer."""
    return {
        "id": ref(incident.pk),
        "fleet": incident.fleet.slug,
        "kind": incident.kind,
        "paths": incident.paths,
        "actor": {"agent_id": incident.actor.agent_id,
                  "session_id": incident.actor_session or None},
        "holder": None if incident.holder is None else {
            "agent_id": incident.holder.agent_id,
            "session_id": incident.holder_session or None},
        "detail": incident.detail,
        "at": _iso(incident.at),
        "text": ev.incident_line(incident.kind, incident.actor.agent_id, incident.paths,
                                 _iso(incident.at), detail=incident.detail,
                                 holder=incident.holder.agent_id if incident.holder else None),
    }


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def recent(fleet: Fleet, now: datetime, *, limit: int = 200) -> list[dict[str, Any]]:
    """The fleet's incidents within RECENT, newest first, as the cache shows them (the
    roster groups them by holder; the briefing lists them with holders named)."""
    rows = (Incident.objects.filter(fleet=fleet, at__gte=now - RECENT)
            .select_related("actor", "holder")[:limit])
    return [{"id": ref(i.pk), "kind": i.kind, "by": i.actor.agent_id,
             "holder": i.holder.agent_id if i.holder else None, "paths": i.paths,
             "detail": i.detail, "at": _iso(i.at),
             "text": ev.incident_line(i.kind, i.actor.agent_id, i.paths, _iso(i.at),
                                      detail=i.detail)}
            for i in rows]

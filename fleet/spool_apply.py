"""Apply lease.*, handoff.* and session.end spool events (the drain's appliers for coordination).

Each function takes an already-validated envelope (see ctxlake_site.drain) and returns a
small JSON result that the drain records with the event id. A payload the agent got
wrong raises InvalidEvent, which sends the line to the dead-letter file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar, cast

from django.db import transaction
from django.utils import timezone

from fleet import actions, handoffs, incidents, leases
from fleet.globs import BadPath, normalise
from fleet.models import Agent, Fleet, Handoff, Session
from mcp_bridge.contract import events as ev

T = TypeVar("T")  # a checked request
R = TypeVar("R")  # its result


class InvalidEvent(ValueError):
    """A spool event whose payload cannot be applied; the message is the dead-letter reason."""


@dataclass
class Envelope:
    """The fields every spool event carries, resolved to rows."""

    event_id: str
    kind: str
    fleet: Fleet
    agent: Agent
    session: Session | None
    at: datetime
    payload: dict[str, Any]


def _str_list(payload: dict[str, Any], key: str) -> list[str]:
    value = payload.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidEvent(f"payload.{key} must be a list of strings")
    return value


def _instant(payload: dict[str, Any], key: str) -> datetime | None:
    """An optional instant field, already checked by the contract; None when absent."""
    value = payload.get(key)
    if value is None:
        return None
    if ev.instant_problem(value, key):
        raise InvalidEvent(f"payload.{ev.instant_problem(value, key)}")
    return ev.parse_instant(value)


def _text(payload: dict[str, Any], key: str, *, limit: int, required: bool = False) -> str:
    value = payload.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidEvent(
            f"payload.{key} must be a non-empty string"
            if required
            else f"payload.{key} must be a string"
        )
    return value.strip()[:limit]


Outcome = dict[str, Any] | InvalidEvent
BatchApplier = Callable[[Sequence[Envelope]], list[Outcome]]


def one(batch: BatchApplier, event: Envelope) -> dict[str, Any]:
    """Apply a single event with a batch applier; InvalidEvent is raised, not returned."""
    (outcome,) = batch([event])
    if isinstance(outcome, InvalidEvent):
        raise outcome
    return outcome


def checked_each(
    events: Sequence[Envelope], check: Callable[[Envelope], T]
) -> tuple[list[Outcome | None], list[tuple[int, T]]]:
    """Check every event's payload: outcomes with the invalid ones filled in, and the rest."""
    outcomes: list[Outcome | None] = [None] * len(events)
    valid: list[tuple[int, T]] = []
    for i, event in enumerate(events):
        try:
            valid.append((i, check(event)))
        except InvalidEvent as exc:
            outcomes[i] = exc
    return outcomes, valid


def apply_set(
    events: Sequence[Envelope],
    check: Callable[[Envelope], T],
    apply_many: Callable[[list[T]], Sequence[R | ValueError]],
    render: Callable[[R], dict[str, Any]],
) -> list[Outcome]:
    """The shape of a batch applier: check each payload, apply the valid requests in one
    call of a domain function that returns a result or a ValueError per request, and
    render each result as the event's recorded outcome (a ValueError dead-letters it)."""
    outcomes, valid = checked_each(events, check)
    if valid:
        results = apply_many([request for _, request in valid])
        for (i, _), result in zip(valid, results, strict=True):
            outcomes[i] = (
                InvalidEvent(str(result)) if isinstance(result, ValueError) else render(result)
            )
    return filled(outcomes)


def _claim_request(event: Envelope) -> leases.ClaimRequest:
    ttl_secs = event.payload.get("ttl_secs")
    if ttl_secs is not None and (
        not isinstance(ttl_secs, int) or isinstance(ttl_secs, bool) or ttl_secs <= 0
    ):
        raise InvalidEvent("payload.ttl_secs must be a positive integer")
    return leases.ClaimRequest(
        event.agent,
        _str_list(event.payload, "paths"),
        ttl=timedelta(seconds=ttl_secs) if ttl_secs else None,
        reason=_text(event.payload, "reason", limit=ev.REASON_MAX_CHARS),
        session=event.session,
        now=min(event.at, timezone.now()),
    )


def apply_lease_claims(events: Sequence[Envelope]) -> list[Outcome]:
    """lease.claim events of one fleet, in order (see leases.claim_many's precondition)."""
    return apply_set(
        events, _claim_request,
        # mypy cannot split Claimed | LeaseCapReached | ValueError into R | ValueError
        cast("Callable[..., Sequence[Any]]", partial(actions.claim_leases, events[0].fleet)),
        _claimed,
    )


def _claimed(claimed: actions.Claimed | leases.LeaseCapReached) -> dict[str, Any]:
    if isinstance(claimed, leases.LeaseCapReached):  # applied as a refusal, not dead-lettered
        return {"held": [], "contention": [], "refused": str(claimed), "cap": claimed.cap}
    result = claimed.result
    out: dict[str, Any] = {
        "held": [lease.path for lease in result.held],
        "contention": [
            {
                "path": c.mine.path,
                "other_agent": c.theirs.agent.agent_id,
                "other_path": c.theirs.path,
            }
            for c in result.contention
        ],
    }
    if claimed.possibly_stale:
        out["possibly_stale"] = claimed.possibly_stale
    return out


def _release_request(event: Envelope) -> leases.ReleaseRequest:
    paths = _str_list(event.payload, "paths")
    release_all = event.payload.get("all") is True or not paths
    return leases.ReleaseRequest(event.agent, None if release_all else paths)


def apply_lease_releases(events: Sequence[Envelope]) -> list[Outcome]:
    """lease.release events of one fleet, in order, in one statement."""
    return apply_set(
        events, _release_request, partial(actions.release_leases, events[0].fleet), _released
    )


def _released(result: leases.ReleaseResult) -> dict[str, Any]:
    return {"released": len(result.released), "not_held": result.not_held}


def _handoff(event: Envelope) -> tuple[Handoff, bool]:
    status = event.payload.get("status", Handoff.Status.IN_PROGRESS)
    if status not in Handoff.Status.values:
        raise InvalidEvent(f"payload.status must be one of {', '.join(Handoff.Status.values)}")
    transfer = event.payload.get("transfer_leases", False)
    if not isinstance(transfer, bool):  # validate before writing: the drain relies on it
        raise InvalidEvent("payload.transfer_leases must be a boolean")
    handoff = Handoff(
        fleet=event.fleet,
        from_agent=event.agent,
        from_session=event.session,
        summary=_text(event.payload, "summary", limit=ev.SUMMARY_MAX_CHARS, required=True),
        status=status,
        next_steps=_text(event.payload, "next", limit=ev.NEXT_MAX_CHARS),
        source_trust=Handoff.SourceTrust.AGENT,  # whatever the line claims: it came from an agent
    )
    return handoff, transfer


def apply_handoff_creates(events: Sequence[Envelope]) -> list[Outcome]:
    """handoff.create events: inserted in one statement, then the lease offers, in order."""
    outcomes, valid = checked_each(events, _handoff)
    if valid:
        notes = [
            (handoff, min(events[i].at, timezone.now()) if transfer else None)
            for i, (handoff, transfer) in valid
        ]
        created = actions.create_handoffs(events[0].fleet, notes)
        for (i, _), (handoff, offered) in zip(valid, created, strict=True):
            outcome: dict[str, Any] = {"handoff": handoff.pk}
            if offered is not None:
                outcome["offered"] = sorted(lease.path for lease in offered)
            outcomes[i] = outcome
    return filled(outcomes)


def _target(event: Envelope) -> tuple[str, Handoff | None, int]:
    """The handoff a pickup or clear names (None: not one of this fleet's), and the version
    the agent read. The contract has checked both fields; this only guards the types."""
    ref, version = event.payload.get("handoff"), event.payload.get("version")
    pk = ev.handoff_pk(ref)
    if pk is None or type(version) is not int:
        raise InvalidEvent("payload.handoff and payload.version are required")
    found = Handoff.objects.filter(fleet=event.fleet, pk=pk)
    handoff = found.select_related("fleet", "picked_up_by", "from_agent").first()
    return cast(str, ref), handoff, version


def _refused(event: Envelope, verb: str, ref: str, reason: str,
             handoff: Handoff | None) -> dict[str, Any]:
    """Applied as a refusal (not dead-lettered): kept, and shown to the agent."""
    actions.refuse_handoff_change(event.fleet, by=event.agent, verb=verb, ref=ref,
                                  reason=reason, handoff=handoff, session=event.session)
    return {"handoff": ref, "refused": reason}


def _not_pending(ref: str, handoff: Handoff) -> str:
    if handoff.state == Handoff.State.PICKED_UP and handoff.picked_up_by is not None:
        return f"{ref} was already picked up by {handoff.picked_up_by.agent_id}"
    return f"{ref} is {handoff.state}, not pending"


def _moved_on(ref: str, conflict: actions.Conflict) -> str:
    return (f"{ref} changed since version {conflict.expected_version} (it is at "
            f"{conflict.current_version}): read it again in fleet_status and retry")


def apply_handoff_pickup(event: Envelope) -> dict[str, Any]:
    """handoff.pickup: fleet.actions.pick_up_handoff, the gate and compare-and-swap
    included, exactly as the REST pickup; a refusal is recorded for the agent to see."""
    ref, handoff, version = _target(event)
    if handoff is None:
        return _refused(event, handoffs.PICKUP_REFUSED, ref, f"no handoff {ref} in this fleet",
                        None)
    try:
        # A savepoint: NotPending leaves the action's savepoint-free block, which would
        # otherwise doom the drain's whole batch transaction.
        with transaction.atomic():
            result = actions.pick_up_handoff(
                handoff, by=event.agent, expected_version=version, session=event.session,
                confirm=event.payload.get("confirm") is True, now=min(event.at, timezone.now()),
            )
    except actions.NotPending:
        return _refused(event, handoffs.PICKUP_REFUSED, ref, _not_pending(ref, handoff), handoff)
    if isinstance(result, actions.Conflict):
        return _refused(event, handoffs.PICKUP_REFUSED, ref, _moved_on(ref, result), handoff)
    if isinstance(result, actions.NeedsConfirmation):
        return _refused(event, handoffs.PICKUP_REFUSED, ref, result.message, handoff)
    return {"handoff": ref, "picked_up": True, "version": result.version,
            "transferred_leases": result.transferred_paths}


def apply_handoff_clear(event: Envelope) -> dict[str, Any]:
    """handoff.clear: fleet.actions.clear_handoff (compare-and-swap), as the REST clear."""
    ref, handoff, version = _target(event)
    if handoff is None:
        return _refused(event, handoffs.CLEAR_REFUSED, ref, f"no handoff {ref} in this fleet",
                        None)
    result = actions.clear_handoff(handoff, expected_version=version, by=event.agent)
    if isinstance(result, actions.Conflict):
        return _refused(event, handoffs.CLEAR_REFUSED, ref, _moved_on(ref, result), handoff)
    return {"handoff": ref, "cleared": True, "version": result.version}


def apply_lease_intrusion(event: Envelope) -> dict[str, Any]:
    """lease.intrusion: the actor's PreToolUse hook warned that an edit or commit touches
    `holder`'s lease; recorded as an incident for the holder (a repeat is the same one)."""
    holder_id, tool = event.payload.get("holder"), event.payload.get("tool")
    if tool not in ev.INTRUSION_TOOLS or not isinstance(holder_id, str):
        raise InvalidEvent("payload.holder and payload.tool are required")
    holder = Agent.objects.filter(fleet=event.fleet, agent_id=holder_id).first()
    if holder is None:
        raise InvalidEvent(f"payload.holder: no agent {holder_id!r} in this fleet")
    if holder.pk == event.agent.pk:
        raise InvalidEvent("payload.holder is the agent itself: its own lease is no intrusion")
    try:
        paths = [normalise(p) for p in _str_list(event.payload, "paths")]
    except BadPath as exc:
        raise InvalidEvent(f"payload.paths: {exc}") from exc
    incident = incidents.record_intrusion(
        event.fleet, actor=event.agent, holder=holder, tool=tool, paths=paths,
        actor_session=event.session.session_id if event.session else "",
        at=min(event.at, timezone.now()))
    return {"incident": incidents.ref(incident.pk), "holder": holder_id}


def apply_incident_told(event: Envelope) -> dict[str, Any]:
    """incident.told: the holder's bridge showed these incidents; the first time counts.
    Ids that are not the agent's own incidents (as holder) are ignored, not refused: the
    bridge read them from a render, and a fleet-wide list may name others' in error."""
    refs = event.payload.get("incidents")
    if not isinstance(refs, list):
        raise InvalidEvent("payload.incidents is required")
    pks = [int(m.group(1)) for r in refs if isinstance(r, str)
           and (m := ev.INCIDENT_REF_RE.fullmatch(r))]
    marked = incidents.mark_told(event.fleet, holder=event.agent, pks=pks,
                                 at=min(event.at, timezone.now()))
    return {"told": marked}


def filled(outcomes: list[Outcome | None]) -> list[Outcome]:
    assert all(o is not None for o in outcomes)
    return outcomes  # type: ignore[return-value]


def both(first: Callable[[Envelope], dict[str, Any]],
         then: Callable[[Envelope], dict[str, Any]]) -> Callable[[Envelope], dict[str, Any]]:
    """One event applied by two apps in order (in the drain's one transaction), their
    results merged: the composition root joins fleet's and claims' parts of session.end."""
    def applier(event: Envelope) -> dict[str, Any]:
        return {**first(event), **then(event)}
    return applier


def apply_session_end(event: Envelope) -> dict[str, Any]:
    """Close the event's session (the drain created it if this is the first we hear of it)."""
    outcome = event.payload.get("outcome") or ""
    if outcome not in Session.Outcome.values:
        raise InvalidEvent(f"payload.outcome must be one of {', '.join(Session.Outcome.values)}")
    session = event.session
    if session is None:
        raise InvalidEvent("session.end needs the event's session id")
    if session.agent_id != event.agent.pk:
        raise InvalidEvent(f"session {session.session_id} belongs to another agent")
    summary = _text(event.payload, "summary", limit=ev.SUMMARY_MAX_CHARS)
    try:
        changed = [normalise(p) for p in _str_list(event.payload, "changed_paths")][:200]
    except BadPath as exc:
        raise InvalidEvent(f"payload.changed_paths: {exc}") from exc
    ended = actions.end_session(
        session, outcome=outcome, summary=summary, changed_paths=changed, now=event.at,
        repo=_text(event.payload, "repo", limit=ev.REPO_MAX_CHARS),
        branch=_text(event.payload, "branch", limit=ev.BRANCH_MAX_CHARS),
        started_at=_instant(event.payload, "started_at"),
        withheld=event.payload.get("withheld") or (),  # checked by events.problem
    )
    result: dict[str, Any] = {
        "session": session.session_id, "outcome": outcome or None, "changed_paths": changed,
    }
    if ended.possibly_stale:
        result["possibly_stale"] = ended.possibly_stale
    if ended.session.screen_flags:
        result["screened"] = sorted(ended.session.screen_flags)
    return result

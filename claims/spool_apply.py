"""Apply claim.* spool events and session.end's used claims (the drain's appliers for memory)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from claims import moderation, usefulness
from fleet.spool_apply import Envelope, InvalidEvent, Outcome, apply_set, checked_each, filled


def _proposal(event: Envelope) -> moderation.ProposalRequest:
    """A proposal from an agent: always agent scope, never promoted, whatever the line says."""
    payload = event.payload
    evidence = payload.get("evidence")
    if not isinstance(evidence, list):
        raise InvalidEvent("payload.evidence must be a list of citations")
    for key in ("claim", "type", "subject"):
        if not isinstance(payload.get(key), str):
            raise InvalidEvent(f"payload.{key} must be a string")
    return moderation.ProposalRequest(
        text=payload["claim"],
        type=payload["type"],
        subject=payload["subject"],
        evidence=evidence,
        by_agent=event.agent,
        extractor=payload.get("extractor") or "",
    )


def apply_claims_proposed(events: Sequence[Envelope]) -> list[Outcome]:
    """claim.proposed events of one fleet, in order; new claims are inserted set-wise."""
    return apply_set(
        events, _proposal, partial(moderation.propose_many, events[0].fleet), _proposed
    )


def _proposed(result: moderation.Proposal) -> dict[str, Any]:
    return {
        "claim": result.claim.public_id,
        "created": result.created,
        "evidence_added": result.evidence_added,
    }


def _shown(event: Envelope) -> usefulness.Shown:
    if event.session is None:
        raise InvalidEvent("claim.served needs the event's session id")
    return usefulness.Shown(session=event.session, claim_ids=event.payload["claims"],
                            via=event.payload["via"], at=event.at)


def apply_claims_served(events: Sequence[Envelope]) -> list[Outcome]:
    """claim.served events of one fleet: each (claim, session) pair counted once, set-wise."""
    outcomes, valid = checked_each(events, _shown)
    if valid:
        unknown = usefulness.record_served(events[0].fleet, [shown for _, shown in valid])
        for (i, shown), missing in zip(valid, unknown, strict=True):
            outcomes[i] = {"served": len(shown.claim_ids) - len(missing), "unknown": missing}
    return filled(outcomes)


def apply_claim_feedback(event: Envelope) -> dict[str, Any]:
    """An agent's word on a claim becomes a moderator's task; the claim is not changed."""
    p = event.payload
    try:
        fb = usefulness.file_feedback(event.fleet, p["claim"], agent=event.agent,
                                      session=event.session, verdict=p["verdict"],
                                      note=p.get("note") or "")
    except usefulness.FeedbackRefused as e:
        raise InvalidEvent(str(e)) from e
    return {"feedback": fb.pk, "claim": p["claim"], "verdict": fb.verdict}


def apply_session_uses(event: Envelope) -> dict[str, Any]:
    """session.end's `used` (claims the session cited or acted on, found by its capture):
    marked after the session's outcome is stored, so the tallies count it."""
    used = event.payload.get("used") or []
    if event.session is None:
        return {}
    unknown = usefulness.record_used(event.session, used)
    return {"used": [i for i in used if i not in unknown], **({"unknown": unknown} if unknown
                                                               else {})}

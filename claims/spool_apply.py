"""Apply claim.proposed spool events (the drain's applier for memory)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from claims import moderation
from fleet.spool_apply import Envelope, InvalidEvent, Outcome, apply_set


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

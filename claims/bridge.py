"""Django's half of the bridge contract for memory: apply claim.* spool events."""

from __future__ import annotations

from typing import Any

from claims import moderation
from fleet.bridge import Envelope, InvalidEvent


def apply_claim_proposed(event: Envelope) -> dict[str, Any]:
    """A proposal from an agent: always agent scope, never promoted, whatever the line says."""
    payload = event.payload
    evidence = payload.get("evidence")
    if not isinstance(evidence, list):
        raise InvalidEvent("payload.evidence must be a list of citations")
    for key in ("claim", "type", "subject"):
        if not isinstance(payload.get(key), str):
            raise InvalidEvent(f"payload.{key} must be a string")
    try:
        proposal = moderation.propose_claim(
            event.fleet,
            text=payload["claim"],
            type=payload["type"],
            subject=payload["subject"],
            evidence=evidence,
            by_agent=event.agent,
        )
    except moderation.InvalidProposal as exc:
        raise InvalidEvent(str(exc)) from exc
    return {
        "claim": proposal.claim.public_id,
        "created": proposal.created,
        "evidence_added": proposal.evidence_added,
    }

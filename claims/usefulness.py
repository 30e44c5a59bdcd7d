"""The usefulness loop's writes: which claims a session was shown and used, agents'
feedback as moderators' tasks, and the tallies and confidence that follow from them.

Nothing here changes a claim's status: the tallies move its confidence within the bounds
mcp_bridge.contract.usefulness sets, and feedback waits for a person. Every function that
changes a tally ends by `refresh`ing the claims it touched, so Claim.confidence (what both
search paths rank by) is never older than the last write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from claims.models import Claim, ClaimEvent, ClaimFeedback, ClaimUse
from claims.moderators import GateRefused, can_moderate
from claims.tallies import refresh
from fleet import activity, rendering
from fleet.models import Agent, Fleet, Session
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import redact


def claims_by_id(fleet: Fleet, public_ids: Iterable[str]) -> dict[str, Claim]:
    """{"cc-07": claim} for the ids that name one of the fleet's claims (others left out)."""
    numbers = {int(m[1]): i for i in public_ids if (m := ev.CLAIM_ID_RE.fullmatch(i))}
    found = Claim.objects.filter(fleet=fleet, number__in=numbers).defer(
        "embedding", "search_vector")
    return {numbers[c.number]: c for c in found}


@dataclass(frozen=True)
class Shown:
    """One served event: a session shown these claims through this door at this time."""

    session: Session
    claim_ids: Sequence[str]
    via: str
    at: datetime


def record_served(fleet: Fleet, shown: Sequence[Shown]) -> list[list[str]]:
    """Count each session's showing of each claim (one ClaimUse row per pair); returns,
    per event, the ids that named no claim of the fleet (ignored, reported)."""
    by_id = claims_by_id(fleet, {i for s in shown for i in s.claim_ids})
    rows = _uses({(by_id[i].pk, s.session.pk) for s in shown for i in s.claim_ids if i in by_id})
    for s in shown:
        for i in s.claim_ids:
            if i in by_id:
                use = rows[(by_id[i].pk, s.session.pk)]
                use.served_count += 1
                use.via = sorted({*use.via, s.via})
                use.first_served_at = min(filter(None, (use.first_served_at, s.at)))
    _save(rows.values())
    refresh({c.pk for c in by_id.values()})
    return [[i for i in s.claim_ids if i not in by_id] for s in shown]


def record_used(session: Session, claim_ids: Sequence[str]) -> list[str]:
    """Mark the claims the session cited or acted on; then refresh every claim the
    session touched (its outcome, set in the same session.end, now counts for them).
    Returns the ids that named no claim of the fleet."""
    by_id = claims_by_id(session.fleet, claim_ids)
    rows = _uses({(c.pk, session.pk) for c in by_id.values()})
    for use in rows.values():
        use.used = True
    _save(rows.values())
    refresh(ClaimUse.objects.filter(session=session).values_list("claim_id", flat=True))
    return [i for i in claim_ids if i not in by_id]


def _uses(pairs: set[tuple[int, int]]) -> dict[tuple[int, int], ClaimUse]:
    """The ClaimUse rows for (claim, session) pairs: existing ones read, the rest new."""
    if not pairs:
        return {}
    rows = ClaimUse.objects.filter(claim_id__in={c for c, _ in pairs},
                                   session_id__in={s for _, s in pairs})
    found = {(u.claim_id, u.session_id): u for u in rows if (u.claim_id, u.session_id) in pairs}
    return {p: found.get(p) or ClaimUse(claim_id=p[0], session_id=p[1]) for p in pairs}


def _save(rows: Iterable[ClaimUse]) -> None:
    rows = list(rows)
    ClaimUse.objects.bulk_create([u for u in rows if u.pk is None])
    ClaimUse.objects.bulk_update([u for u in rows if u.pk is not None],
                                 ["served_count", "via", "first_served_at", "used"])


# -- feedback: a moderator's task ------------------------------------------------------------

class FeedbackRefused(ValueError):
    """Feedback the contract or the fleet's claims refuse; the message says why."""


def file_feedback(fleet: Fleet, claim_id: str, *, agent: Agent | None,
                  session: Session | None, verdict: str, note: str = "") -> ClaimFeedback:
    """Record an agent's word on one of the fleet's claims, for a moderator; the claim
    itself is not changed (its confidence moves within the rule's bounds). Checked before
    the transaction opens, so a refusal leaves the caller's transaction usable."""
    payload = {"claim": claim_id, "verdict": verdict, **({"note": note} if note else {})}
    problem = ev.problem(ev.KIND_CLAIM_FEEDBACK, payload)
    if problem:
        raise FeedbackRefused(problem)
    claim = claims_by_id(fleet, [claim_id]).get(claim_id)
    if claim is None:
        raise FeedbackRefused(f"{claim_id} is not a claim of fleet {fleet.slug}")
    with transaction.atomic():
        fb = ClaimFeedback(claim=claim, agent=agent, session=session, verdict=verdict,
                           note=redact.scrub_text(note.strip()))
        fb.screen_text_fields()
        fb.save()
        activity.record(fleet, "claim.feedback", target=claim, agent=agent,
                        claim=claim.public_id, verdict=verdict,
                        session=session.session_id if session else None)
        refresh([claim.pk])
        rendering.request_render(fleet)
    return fb


class AlreadyResolved(ValueError):
    pass


@transaction.atomic
def resolve_feedback(fb: ClaimFeedback, *, by: Any, resolution: str, note: str = "") -> None:
    """Close a feedback task (dismissed, or acted on); its weight on the claim goes."""
    _may_moderate(by, fb.claim.fleet)
    if resolution not in (ClaimFeedback.Resolution.DISMISSED, ClaimFeedback.Resolution.ACTED):
        raise ValueError(f"resolution must be dismissed or acted, not {resolution!r}")
    won = ClaimFeedback.objects.filter(pk=fb.pk, resolution="").update(
        resolution=resolution, resolved_by=by, resolved_at=timezone.now())
    if not won:
        raise AlreadyResolved(fb.pk)
    activity.record(fb.claim.fleet, "claim.feedback_resolved", target=fb.claim, user=by,
                    claim=fb.claim.public_id, resolution=resolution, note=note)
    refresh([fb.claim_id])
    rendering.request_render(fb.claim.fleet)


@transaction.atomic
def set_confidence(claim: Claim, *, by: Any, value: float | None, note: str = "") -> Claim:
    """A moderator sets the claim's confidence (None: back to the derived value); audited."""
    _may_moderate(by, claim.fleet)
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError("confidence must be from 0 to 1")
    before = claim.confidence
    Claim.objects.filter(pk=claim.pk).update(confidence_set=value)
    claim.refresh_from_db()
    refresh([claim.pk])
    claim.refresh_from_db()
    ClaimEvent.objects.create(claim=claim, kind=ClaimEvent.Kind.CONFIDENCE, actor_user=by,
                              note=note, data={"before": before, "after": claim.confidence,
                                               "set": value})
    rendering.request_render(claim.fleet)
    return claim


def _may_moderate(by: Any, fleet: Fleet) -> None:
    if not can_moderate(by, fleet):
        raise GateRefused("You may not moderate claims in this fleet.")

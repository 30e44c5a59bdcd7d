"""Promoted claims that say opposite things: found by the proposal conflict rules
(claims.conflicts over the nearest promoted neighbours), marked to agents ("CONFLICTS
WITH cc-14") and listed in memory health until a person resolves the pair.

Found at promotion (claims.moderation.promote_claim) and by the periodic scan
(`scan_fleet`, in maintain_db). A pair is open while both claims are live and no person
has resolved it; contesting, retracting or superseding either side resolves it by making
that side no longer live, and "not a conflict" resolves it for good.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from claims import conflicts, embeddings
from claims.models import Claim, Contradiction
from claims.moderators import GateRefused, can_moderate
from fleet import activity, rendering
from fleet.models import Fleet

#: Promoted neighbours each claim is compared with.
NEIGHBOURS = 5


def find_for(claim: Claim) -> list[Contradiction]:
    """Record the open contradictions between `claim` and its nearest promoted
    neighbours; returns the new pairs (a pair found before, resolved or not, stays as is)."""
    if claim.status != Claim.Status.PROMOTED:
        return []
    found = []
    for other, similarity in embeddings.nearest(claim, limit=NEIGHBOURS,
                                                 statuses=(Claim.Status.PROMOTED,)):
        if conflicts.relation(claim.text, other.text, similarity) != conflicts.CONFLICT:
            continue
        low, high = sorted((claim, other), key=lambda c: c.pk)
        pair, created = Contradiction.objects.get_or_create(
            claim=low, other=high, defaults={
                "similarity": round(similarity, 4),
                "reasons": list(conflicts.compare(low.text, high.text).reasons)})
        if created:
            found.append(pair)
            activity.record(claim.fleet, "claim.contradiction", target=claim,
                            claim=low.public_id, other=high.public_id)
    return found


def scan_fleet(fleet: Fleet) -> int:
    """Compare every live promoted claim with its neighbours; returns new pairs found."""
    new = 0
    live = Claim.objects.for_fleet(fleet).live(timezone.now()).filter(
        contested=False, embedding__isnull=False)
    for claim in live.iterator(chunk_size=500):
        new += len(find_for(claim))
    if new:
        rendering.request_render(fleet)
    return new


def _is_live(claim: Claim, now: Any) -> bool:
    """ClaimQuerySet.live, uncontested, for one loaded claim (the pairs are few; their
    claims are already read)."""
    return (claim.status == Claim.Status.PROMOTED and claim.superseded_by_id is None
            and not claim.contested and (claim.valid_until is None or claim.valid_until > now))


def open_pairs(fleet: Fleet) -> list[Contradiction]:
    """Unresolved pairs whose two claims are both live, promoted and uncontested, most
    similar first. One indexed query over the (few) unresolved pairs; liveness is checked
    on the loaded rows, not by joining the fleet's claims twice."""
    now = timezone.now()
    pairs = (Contradiction.objects.filter(claim__fleet=fleet, resolved_at__isnull=True)
             .select_related("claim", "other")
             .defer(*(f"{side}__{f}" for side in ("claim", "other")
                      for f in ("embedding", "search_vector")))
             .order_by("-similarity", "pk"))
    return [p for p in pairs if _is_live(p.claim, now) and _is_live(p.other, now)]


def open_by_claim(fleet: Fleet) -> dict[int, list[str]]:
    """claim pk → the public ids of the claims it openly contradicts."""
    marks: dict[int, list[str]] = {}
    for pair in open_pairs(fleet):
        marks.setdefault(pair.claim_id, []).append(pair.other.public_id)
        marks.setdefault(pair.other_id, []).append(pair.claim.public_id)
    return marks


@transaction.atomic
def dismiss(pair: Contradiction, *, by: Any, note: str = "") -> None:
    """A person says the two claims do not conflict: the mark goes, for good."""
    if not can_moderate(by, pair.claim.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    Contradiction.objects.filter(pk=pair.pk, resolved_at__isnull=True).update(
        resolved_at=timezone.now(), resolved_by=by, note=note)
    activity.record(pair.claim.fleet, "claim.contradiction_dismissed", target=pair.claim,
                    user=by, claim=pair.claim.public_id, other=pair.other.public_id)
    rendering.request_render(pair.claim.fleet)

"""A claim's usefulness tallies and the confidence they earn, recounted from the rows.

The one place Claim.confidence is written after a claim is filed: every write that moves
a tally (a use, a session's outcome, feedback, a contest, a corroboration) ends with
`refresh` of the claims it touched, so what both search paths rank by is never older than
the last write. The rule itself is mcp_bridge.contract.usefulness.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from claims.models import Claim, ClaimFeedback, ClaimUse
from fleet.models import Fleet, Session
from mcp_bridge.contract import usefulness as rule

#: Sessions of the last this-long set the fleet's base success rate.
BASE_RATE_WINDOW = timedelta(days=90)


def refresh(claim_pks: Iterable[int]) -> int:
    """Recount the tallies of these claims and re-derive their confidence; returns how many
    rows changed. A moderator's `confidence_set` stands in for the derived value."""
    pks = set(claim_pks)
    if not pks:
        return 0
    claims = list(Claim.objects.filter(pk__in=pks).defer("embedding", "search_vector"))
    uses = _use_counts(pks)
    flags = dict(
        ClaimFeedback.objects.filter(claim_id__in=pks, resolution="",
                                     verdict__in=ClaimFeedback.AGAINST)
        .values("claim_id").annotate(n=Count("agent_id", distinct=True))
        .values_list("claim_id", "n"))
    rates = {f: fleet_base_rate(f) for f in {c.fleet_id for c in claims}}
    changed = []
    for claim in claims:
        counts = uses.get(claim.pk, {})
        before = _tally(claim)
        claim.served_sessions = counts.get("served", 0)
        claim.used_sessions = counts.get("used", 0)
        claim.used_succeeded = counts.get("success", 0)
        claim.used_partial = counts.get("partial", 0)
        claim.used_failed = counts.get("failed", 0)
        claim.open_flags = flags.get(claim.pk, 0)
        derived = rule.confidence(record(claim), rates[claim.fleet_id])
        claim.confidence = derived if claim.confidence_set is None else claim.confidence_set
        if _tally(claim) != before:
            changed.append(claim)
    Claim.objects.bulk_update(changed, [*_TALLY, "confidence"])
    return len(changed)


_TALLY = ("served_sessions", "used_sessions", "used_succeeded", "used_partial", "used_failed",
          "open_flags")


def _tally(claim: Claim) -> tuple[Any, ...]:
    return (*(getattr(claim, f) for f in _TALLY), claim.confidence)


def _use_counts(pks: set[int]) -> dict[int, dict[str, int]]:
    used = Q(used=True)
    rows = (
        ClaimUse.objects.filter(claim_id__in=pks).values("claim_id").annotate(
            n_served=Count("id", filter=Q(served_count__gt=0)),
            n_used=Count("id", filter=used),
            n_success=Count("id", filter=used & Q(session__outcome="success")),
            n_partial=Count("id", filter=used & Q(session__outcome="partial")),
            n_failed=Count("id", filter=used & Q(session__outcome="failed")),
        )
    )
    out: dict[int, dict[str, int]] = {}
    for r in rows:
        row: dict[str, Any] = dict(r)
        out[row.pop("claim_id")] = {k.removeprefix("n_"): v for k, v in row.items()}
    return out


def record(claim: Claim) -> rule.Record:
    """The claim's stored tallies as the rule reads them."""
    return rule.Record(
        evidence_sessions=claim.independent_sessions, served=claim.served_sessions,
        used=claim.used_sessions, succeeded=claim.used_succeeded, partial=claim.used_partial,
        failed=claim.used_failed, flags=claim.open_flags, contested=claim.contested)


def fleet_base_rate(fleet_id: int) -> float:
    """How the fleet's sessions of the last BASE_RATE_WINDOW ended, as the rule's rate."""
    since = timezone.now() - BASE_RATE_WINDOW
    counts = dict(
        Session.objects.filter(fleet_id=fleet_id, ended_at__gte=since)
        .exclude(outcome="").values("outcome").annotate(n=Count("id"))
        .values_list("outcome", "n"))
    return rule.base_rate(counts)


def why(claim: Claim, *, brief: bool = False) -> str:
    return rule.why(record(claim), stale=claim.stale_since if claim.staleness > 0 else "",
                    brief=brief)


def refresh_fleet(fleet: Fleet) -> int:
    """Re-derive every live claim's confidence (the fleet's base rate moves with time)."""
    pks = Claim.objects.filter(fleet=fleet).exclude(
        status__in=(Claim.Status.REJECTED, Claim.Status.RETRACTED)).values_list("pk", flat=True)
    return refresh(pks)

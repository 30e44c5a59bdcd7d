"""Background tasks for claims: embed new and edited claims, batched, and fold near
duplicates into the claims they repeat."""

from __future__ import annotations

from django.core.cache import cache

from claims import embeddings, moderation
from claims.models import Claim
from fleet import rendering
from fleet.models import Fleet

PENDING_KEY = "ctxlake:embed-pending"
NEAR_DUPLICATE = 0.95


def request_embedding() -> None:
    """After commit, make sure an embedding pass is queued (one pass absorbs a burst)."""

    def enqueue() -> None:
        from django_q.tasks import async_task

        if cache.add(PENDING_KEY, "1", timeout=300):
            async_task("claims.tasks.embed_pending", task_name="embed pending claims")

    rendering.on_commit_once("embed", enqueue)


def embed_pending() -> str:
    """Embed every claim lacking a current vector; then fold in near duplicates."""
    cache.delete(PENDING_KEY)
    todo = list(embeddings.needing_embedding().values_list("pk", flat=True))
    if not todo:
        return "nothing to embed"
    embeddings.embed_claims(Claim.objects.filter(pk__in=todo))
    folded = fold_near_duplicates(Claim.objects.filter(pk__in=todo, status="proposed"))
    for fleet in Fleet.objects.filter(claims__pk__in=todo, claims__status="promoted").distinct():
        rendering.request_render(fleet)
    return f"embedded {len(todo)} claim(s), folded {folded} near duplicate(s)"


def fold_near_duplicates(proposed: object) -> int:
    """A new proposal whose nearest claim is ≥ 0.95 cosine corroborates that claim instead."""
    folded = 0
    for claim in proposed.order_by("number"):  # type: ignore[attr-defined]
        claim.refresh_from_db()
        if claim.status != Claim.Status.PROPOSED:
            continue
        match = embeddings.nearest(claim, limit=1, statuses=("proposed", "promoted"))
        if match and match[0][1] >= NEAR_DUPLICATE and match[0][0].number < claim.number:
            moderation.absorb_near_duplicate(claim, into=match[0][0], similarity=match[0][1])
            folded += 1
    return folded

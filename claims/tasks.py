"""Background tasks for claims: embed new and edited claims, batched, and label each new
proposal with its nearest claim (likely duplicate / possible conflict) for the moderator."""

from __future__ import annotations

from django.core.cache import cache
from django.db.models import QuerySet

from claims import conflicts, embeddings, moderation
from claims.models import Claim
from fleet import rendering
from fleet.models import Fleet

PENDING_KEY = "ctxlake:embed-pending"


def request_embedding() -> None:
    """After commit, make sure an embedding pass is queued (one pass absorbs a burst)."""

    def enqueue() -> None:
        from django_q.tasks import async_task

        if rendering.mark_pending(PENDING_KEY, "1", timeout=300):
            async_task("claims.tasks.embed_pending", task_name="embed pending claims")

    rendering.on_commit_once("embed", enqueue)


def embed_pending() -> str:
    """Embed every claim lacking a current vector; then label new proposals' neighbours."""
    cache.delete(PENDING_KEY)
    todo = list(embeddings.needing_embedding().values_list("pk", flat=True))
    if not todo:
        return "nothing to embed"
    embeddings.embed_claims(Claim.objects.filter(pk__in=todo))
    labelled = label_neighbours(Claim.objects.filter(pk__in=todo, status="proposed"))
    for fleet in Fleet.objects.filter(claims__pk__in=todo, claims__status="promoted").distinct():
        rendering.request_render(fleet)
    return f"embedded {len(todo)} claim(s), labelled {labelled} near neighbour(s)"


def label_neighbours(proposed: QuerySet[Claim]) -> int:
    """Label each proposal whose nearest live claim is close: a likely duplicate or a
    possible conflict (claims.conflicts). Only a label: the proposal stays in the queue and
    the neighbour is untouched; merging, superseding or keeping both is a person's call.
    An exact-text label set when the proposal was filed is kept."""
    todo = proposed.exclude(near_similarity=1.0, near_relation__gt="")
    found = embeddings.nearest_each(todo, statuses=moderation.LIVE)
    labels = [
        moderation.NearLabel(claim, near, similarity, relation)
        for claim, near, similarity in found.values()
        if (relation := conflicts.relation(near.text, claim.text, similarity)) is not None
    ]
    moderation.label_near_claims(labels)
    return len(labels)

"""Claim embeddings: which model, which claims need (re)embedding, and computing them.

The model is pluggable by setting (`CTXLAKE_EMBEDDER`, a module exposing NAME, DIMS and
`embed(texts)`; default `mcp_bridge.contract.embed`, the one the bridge embeds queries with).
Every claim records the model that embedded it, so a model change shows up as claims
whose `embedding_model` differs — `manage.py reembed_claims` then redoes them, and the
snapshot only ever carries vectors of the model its manifest names.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from functools import cache, lru_cache
from types import ModuleType
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from pgvector.django import CosineDistance

from claims.models import EMBEDDING_DIMS, Claim
from fleet.models import Fleet

BATCH = 64
EF_SEARCH = 100  # pgvector's default of 40 missed true neighbours at 1k rows


@cache
def embedder() -> ModuleType:
    module = importlib.import_module(settings.CTXLAKE_EMBEDDER)
    if module.DIMS != EMBEDDING_DIMS:
        raise RuntimeError(
            f"{settings.CTXLAKE_EMBEDDER} makes {module.DIMS}-dim vectors; the "
            f"claims table stores {EMBEDDING_DIMS} (a migration changes that)"
        )
    return module


def query_vector(text: str) -> Any:
    """One query's vector from the configured embedder (its own cache when it has one)."""
    model = embedder()
    if hasattr(model, "embed_query"):
        return model.embed_query(text)
    return _embed_one(text)


@lru_cache(maxsize=256)
def _embed_one(text: str) -> Any:
    return embedder().embed([text])[0]


def needing_embedding(fleet: Fleet | None = None) -> QuerySet[Claim]:
    """Claims without a vector from the current model."""
    qs = Claim.objects.filter(Q(embedding__isnull=True) | ~Q(embedding_model=embedder().NAME))
    return qs.filter(fleet=fleet) if fleet else qs


def embed_claims(
    claims: QuerySet[Claim],
    *,
    batch: int = BATCH,
    progress: Callable[[int, float], None] | None = None,
) -> int:
    """Embed `claims` in batches, storing vector and model name; returns how many."""
    model = embedder()
    done, started = 0, time.monotonic()
    ids = list(claims.order_by("pk").values_list("pk", flat=True))
    for i in range(0, len(ids), batch):
        rows = list(Claim.objects.filter(pk__in=ids[i : i + batch]).only("pk", "text"))
        vectors = model.embed([c.text for c in rows])
        for claim, vector in zip(rows, vectors, strict=True):
            claim.embedding, claim.embedding_model = vector, model.NAME
        Claim.objects.bulk_update(rows, ["embedding", "embedding_model"])
        done += len(rows)
        if progress:
            progress(done, done / max(time.monotonic() - started, 1e-9))
    return done


def nearest(
    claim: Claim,
    *,
    limit: int = 5,
    statuses: tuple[str, ...] | None = None,
) -> list[tuple[Claim, float]]:
    """The fleet's claims closest to `claim` by cosine similarity (HNSW, ef_search raised)."""
    if claim.embedding is None:
        return []
    qs = Claim.objects.filter(fleet_id=claim.fleet_id, embedding__isnull=False).exclude(pk=claim.pk)
    if statuses:
        qs = qs.filter(status__in=statuses)
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(f"SET LOCAL hnsw.ef_search = {int(EF_SEARCH)}")
        found = list(
            qs.annotate(distance=CosineDistance("embedding", claim.embedding)).order_by("distance")[
                :limit
            ]
        )
    return [(c, 1.0 - float(c.distance)) for c in found]

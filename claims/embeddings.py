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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery
from pgvector.django import CosineDistance

from claims.models import EMBEDDING_DIMS, Claim
from fleet import column_update
from fleet.models import Fleet

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

BATCH = 64
# The HNSW candidate queue's floor: pgvector's default of 40 missed true neighbours at 1k
# rows once other fleets' rows are filtered out. A scan that must return more rows gets a
# deeper queue (ef_search), and the iterative scan goes on past it when filters drop rows.
EF_SEARCH = 100


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
    """Claims without a vector from the current model.

    Written so that each arm is an index range (claims_claim_unembedded; "another model"
    as below or above the current name on claims_claim_embedded): the embedding pass runs
    after every burst of proposals, and `embedding_model <> name` would read every row of
    every fleet each time instead of the few that wait.
    """
    name = embedder().NAME
    qs = Claim.objects.filter(
        Q(embedding__isnull=True)
        | Q(embedding__isnull=False, embedding_model__lt=name)
        | Q(embedding__isnull=False, embedding_model__gt=name)
    )
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
        column_update.update_columns(rows, ["embedding", "embedding_model"])
        done += len(rows)
        if progress:
            progress(done, done / max(time.monotonic() - started, 1e-9))
    return done


def nearest(
    claim: Claim,
    *,
    limit: int = 5,
    statuses: tuple[str, ...] | None = None,
    among: QuerySet[Claim] | None = None,
) -> list[tuple[Claim, float]]:
    """The fleet's claims closest to `claim` by cosine similarity, nearest first.

    The one nearest-neighbour query over claims (the review page's neighbours; search's
    vector list through `nearest_query`, conflict labels through `nearest_each`): vectors
    of the current model only, over the HNSW index with a queue deep enough for `limit`
    rows and a strict-order iterative scan, so filters applied after the index do not
    starve it.
    `among` narrows the candidates (default: the claim's fleet, the claim excluded).
    """
    if claim.embedding is None or claim.embedding_model != embedder().NAME:
        return []
    qs = among if among is not None else Claim.objects.filter(fleet_id=claim.fleet_id)
    qs = qs.exclude(pk=claim.pk)
    if statuses:
        qs = qs.filter(status__in=statuses)
    with hnsw_scan(limit):
        found = list(nearest_query(qs, claim.embedding)[:limit])
    return [(c, 1.0 - float(c.distance)) for c in found]


def nearest_each(
    claims: QuerySet[Claim], *, statuses: tuple[str, ...]
) -> dict[int, tuple[Claim, Claim, float]]:
    """Each of `claims` (by pk) with its fleet's nearest other claim of `statuses` and their
    cosine similarity, for those that have one; both claims carry pk and text.

    `nearest` for a batch: one statement finds every neighbour (a correlated subquery per
    claim, an HNSW or a sequential scan as the planner judges the fleet's size) and one
    reads the pairs (`_read_pairs`), instead of a transaction, a query and a full model per
    claim. The embedding pass labels each burst of proposals this way.
    """
    candidates = Claim.objects.filter(fleet_id=OuterRef("fleet_id"), status__in=statuses)
    neighbour = nearest_query(candidates.exclude(pk=OuterRef("pk")), OuterRef("embedding"))
    with hnsw_scan(1):
        found = (
            embedded(claims)
            .annotate(near=Subquery(neighbour.values("pk")[:1]))
            .order_by()
            .values_list("pk", "near")
        )
        pairs = {pk: near for pk, near in found if near is not None}
    return _read_pairs(pairs)


_PAIRS = f"""
    SELECT c.id, c.text, n.id, n.text, 1 - (c.embedding <=> n.embedding)
    FROM unnest(%s::bigint[], %s::bigint[]) AS p(claim, near)
    JOIN {Claim._meta.db_table} c ON c.id = p.claim
    JOIN {Claim._meta.db_table} n ON n.id = p.near
"""


def _read_pairs(pairs: dict[int, int]) -> dict[int, tuple[Claim, Claim, float]]:
    """Each (claim, neighbour) pair's two claims (pk and text) and their similarity, by
    pgvector's `<=>` as `nearest` measures it. A pair either of whose claims was deleted
    since the neighbours were found is left out."""
    if not pairs:
        return {}
    with connection.cursor() as cur:
        cur.execute(_PAIRS, [list(pairs), list(pairs.values())])
        rows = cur.fetchall()
    fields = ["id", "text"]
    return {
        pk: (Claim.from_db(connection.alias, fields, (pk, text)),
             Claim.from_db(connection.alias, fields, (near, near_text)), float(similarity))
        for pk, text, near, near_text, similarity in rows
    }


class Distance(TypedDict):
    distance: float  # what nearest_query annotates each claim with


def nearest_query(
    base: QuerySet[Claim], vector: Any
) -> QuerySet[WithAnnotations[Claim, Distance]]:
    """`base`'s claims embedded by the current model, annotated with their cosine
    `distance` to `vector`, nearest first (run it inside `hnsw_scan`)."""
    return (
        embedded(base)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
    )


def embedded(base: QuerySet[Claim]) -> QuerySet[Claim]:
    """`base`'s claims that have a vector from the current model (the only ones a
    similarity may be computed for: another model's vectors live in another space)."""
    return base.filter(embedding__isnull=False, embedding_model=embedder().NAME)


Order = Literal["strict_order", "relaxed_order"]


@contextmanager
def hnsw_scan(n: int, *, order: Order = "strict_order") -> Iterator[None]:
    """A transaction whose HNSW scans keep enough candidates to return n rows.

    SET LOCAL ends with the transaction, so a pooled connection keeps its defaults. With
    the default ef_search (40) a scan yields at most 40 rows, and filters (fleet, status)
    applied after the index leave even fewer; the iterative scan keeps going instead.
    `strict_order` returns rows nearest first; `relaxed_order` is cheaper and may return
    them slightly out of order (the caller sorts, as claims.search does).
    """
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), "
            "set_config('hnsw.iterative_scan', %s, true)",
            [str(ef_search(n)), order],
        )
        yield


def ef_search(n: int) -> int:
    """The HNSW candidate queue for a scan that must return n rows."""
    return max(EF_SEARCH, int(n))

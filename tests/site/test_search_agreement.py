"""Server and bridge rank the same data the same way: the real renderer in between."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from claims import search
from claims.models import Claim
from claims.search import search_claims
from ctxlake_site import workers
from fleet.models import Fleet
from mcp_bridge.cache import Cache
from mcp_bridge.contract import embed
from tests.claims.searchdata import promoted

ROWS = [
    ("ci", "CI caches the cargo registry; bump the cache key after changing Cargo.lock."),
    ("ci", "The clippy gate runs with RUSTFLAGS=-D warnings, so any warning fails CI."),
    ("ci", "GitHub Actions jobs time out after 30 minutes; split the e2e suite to stay under."),
    ("tests", "Integration tests need a local Redis on port 6379 or they hang on connect."),
    ("tests", "pytest -x stops at the first failure; use it when bisecting flaky tests."),
    ("tests", "The snapshot tests are updated with --snapshot-update, never by hand."),
    ("payments", "Refunds are rounded to the nearest cent before the Stripe call."),
    ("payments", "Stripe webhooks are verified with the signing secret from the vault."),
    ("payments", "Currency amounts are stored as integer minor units, never floats."),
    ("deploy", "Deploying to staging requires the VPN; the deploy script hangs without it."),
    ("deploy", "Production deploys are frozen on Fridays after 14:00 UTC."),
    ("deploy", "Rollbacks use the previous container tag; never rebuild an old commit."),
    ("database", "Migrations must be reversible; CI applies and reverts every migration."),
    ("database", "Long-running queries on the orders table need the read replica."),
    ("database", "Adding a NOT NULL column needs a default or the migration locks the table."),
    ("frontend", "The web app builds with pnpm; npm install produces a broken lockfile."),
    ("frontend", "Storybook stories live next to the component, named *.stories.tsx."),
    ("frontend", "CSS modules are required; global styles break the design system theme."),
    ("auth", "Session cookies are SameSite=Lax; cross-site POSTs lose the login."),
    ("auth", "API tokens are hashed with SHA-256 and shown once at creation."),
    ("auth", "The OAuth callback URL must match exactly, trailing slash included."),
    ("logging", "Structured logs use JSON lines; never print to stdout in the workers."),
    ("logging", "Log levels: DEBUG is off in production, set LOG_LEVEL to change it."),
    ("search", "The search index is rebuilt nightly; new documents appear the next day."),
]
QUERIES = [
    "cargo cache key",
    "why does my test suite freeze waiting on the cache server",
    "how are refunds rounded",
    "money stored as floating point",
    "staging deploy hangs",
    "can I ship on a friday afternoon",
    "undo a bad release",
    "migration locks the table",
    "which package manager for the web app",
    "cookies lost after login redirect",
    "where do debug logs go in production",
    "webhook signature verification",
    "ci job exceeds time limit",
    "clippy warnings",
    "oauth redirect mismatch",
]
TOP = 3


@pytest.fixture
def rendered(fleet_a: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cache:
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    rows = [
        {"subject": subject, "text": text, "confidence": 0.5 + (i % 5) / 10, "age_days": i * 9}
        for i, (subject, text) in enumerate(ROWS)
    ]
    claims = promoted(fleet_a, rows)
    Claim.objects.filter(pk=claims[1].pk).update(staleness=0.5)
    Claim.objects.filter(pk=claims[10].pk).update(superseded_by=claims[11])
    Claim.objects.filter(pk=claims[22].pk).update(valid_until=timezone.now() - timedelta(hours=1))
    workers.render_fleet(fleet_a)
    return Cache(tmp_path / "cache" / fleet_a.slug, fleet=fleet_a.slug)


def _server(fleet: Fleet, query: str) -> list[str]:
    return [c.public_id for c in search_claims(fleet, query, k=TOP).claims]


def _bridge(cache: Cache, query: str) -> list[str]:
    snap = cache.snapshot().value
    hits = snap.search(query, k=TOP, query_vector=embed.embed_query(query))
    assert hits.mode == "hybrid"
    return [r["id"] for r in hits.results]


@pytest.mark.parametrize("query", QUERIES)
def test_server_and_bridge_return_the_same_top_results(
    fleet_a: Fleet, rendered: Cache, query: str
) -> None:
    server, bridge = _server(fleet_a, query), _bridge(rendered, query)
    assert server == bridge  # the same BM25, vectors and fusion: the same order


def test_both_sides_leave_out_superseded_and_expired_claims(
    fleet_a: Fleet, rendered: Cache
) -> None:
    gone = {"cc-11", "cc-23"}
    for query in ("friday deploy freeze", "nightly search index rebuild"):
        assert not gone & set(_server(fleet_a, query))
        assert not gone & set(_bridge(rendered, query))


def test_every_query_finds_something_on_both_sides(fleet_a: Fleet, rendered: Cache) -> None:
    empty = [q for q in QUERIES if not _server(fleet_a, q) or not _bridge(rendered, q)]
    assert len(empty) <= 1, empty  # "ship on a friday": its claim is superseded


def test_both_sides_label_the_stale_claim(fleet_a: Fleet, rendered: Cache) -> None:
    query = "clippy warnings"
    server = {c.public_id: c.stale for c in search_claims(fleet_a, query, k=5).claims}
    hits = rendered.snapshot().value.search(query, k=5, query_vector=embed.embed_query(query))
    bridge = {r["id"]: r["stale"] for r in hits.results}
    assert server["cc-02"] is True and bridge["cc-02"] is True
    assert server == bridge


@pytest.mark.parametrize("query", QUERIES)
def test_both_sides_weigh_the_same_any_term_hits_the_same(
    fleet_a: Fleet, rendered: Cache, query: str
) -> None:
    """Document frequencies over the same claims (superseded and expired included), the
    same tokenizer (mcp_bridge.contract.bm25) and the same terms: the same lexical list,
    and equal coverage weights."""
    now = timezone.now()
    statuses = [Claim.Status.PROMOTED]
    narrow = search.narrowing(None, None, None, False, now)
    everything = search.collection(fleet_a, statuses)
    pks, server = search._lexical(fleet_a, everything, narrow, query, TOP, 100,
                                  lambda: search.collection_stats(fleet_a, statuses))
    public = {c.pk: c.public_id for c in Claim.objects.filter(pk__in=pks)}
    server_cover = {public[pk]: c for pk, c in server.items()}
    snap = rendered.snapshot().value
    rowids, bridge = snap._lexical(query, TOP, now, None, None, None)
    ids = dict(snap.db.execute("SELECT rowid, id FROM claims"))
    bridge_cover = {ids[r]: c for r, c in bridge.items()}
    assert [public[pk] for pk in pks] == [ids[r] for r in rowids]
    assert server_cover.keys() == bridge_cover.keys()
    assert all(abs(server_cover[i] - bridge_cover[i]) < 1e-9 for i in server_cover)

"""The server's BM25 is the bridge's: same terms, same statistics, same top 10."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from claims import moderation, search, snapshot_render
from claims.models import Claim, ClaimTerm, text_hash
from fleet.models import Fleet, FleetModerator
from mcp_bridge.contract import bm25
from mcp_bridge.snapshot import Snapshot

TEXTS = [
    ("cache", "Bump the cache_bust key after changing the lockfile; the cache is keyed on it."),
    ("cache", "The CDN caches assets for a day; cache busting uses content hashes."),
    ("cache", "Redis is the cache server in staging; it runs on port 6379."),
    ("ci", "CI runs the tests on every push; flaky tests are retried once."),
    ("ci", "Running the test suite locally needs Docker; the tests hang without it."),
    ("deploy", "Deploys are frozen on Fridays; deploying after 14:00 needs sign-off."),
    ("deploy", "The deploy script reads DEPLOY_ENV; staging deploys need the VPN."),
    ("i18n", "The naïve date parser breaks on café menus; use the locale-aware one."),
    ("search", "The search index is rebuilt nightly; search results lag a day."),
    ("search", "Search uses BM25 over the claim text and subject, fused with vectors."),
    ("cache", "cache cache cache: a claim that says one word many times."),
    ("tests", "Tests"),
]
QUERIES = [
    "cache", "cache busting", "cache_bust", "tests hang", "deploying on friday",
    "naive cafe parser", "search index", "redis port", "staging cache server vpn",
    "docker tests locally", "the", "bm25 vectors", "nothing matches zzzz",
]


@pytest.fixture
def fleet_mod(mod: User, fleet_a: Fleet) -> User:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    return mod


@pytest.fixture
def corpus(fleet_a: Fleet) -> list[Claim]:
    """Promoted claims of varied length; one superseded and one expired (counted in N and
    df on both sides, returned by neither), one proposed (in neither collection)."""
    now = timezone.now()
    claims = [
        Claim.objects.create(fleet=fleet_a, text=text, subject=subject, type="fact",
                             scope="fleet", status="promoted", promoted_at=now,
                             text_hash=text_hash(text), confidence=0.8)
        for subject, text in TEXTS
    ]
    Claim.objects.create(fleet=fleet_a, text="A proposed cache claim nobody promoted.",
                         subject="cache", type="fact", text_hash=text_hash("x"))
    Claim.objects.filter(pk=claims[2].pk).update(superseded_by=claims[0])
    Claim.objects.filter(pk=claims[6].pk).update(valid_until=now - timedelta(hours=1))
    return claims


@pytest.fixture
def snapshot(fleet_a: Fleet, corpus: list[Claim], tmp_path: Path) -> Iterator[Snapshot]:
    yield _render(fleet_a, tmp_path)


def _render(fleet: Fleet, tmp_path: Path) -> Snapshot:
    path = tmp_path / f"snapshot-{timezone.now().timestamp()}.sqlite"
    snapshot_render.write_snapshot(fleet, path, generated_at=timezone.now())
    return Snapshot(path, fleet=fleet.slug)


def _server_lexical(fleet: Fleet, query: str, k: int = 10) -> tuple[list[str], dict[str, float]]:
    search._sizes.clear()  # N and avgdl as they are now, not as cached
    everything = search.collection(fleet, [Claim.Status.PROMOTED])
    narrow = search.narrowing(None, None, None, False, timezone.now())
    pks, cover = search._lexical(fleet, everything, narrow, query, k, search.ranking.depth(k),
                                 lambda: search.collection_stats(fleet, ["promoted"]))
    public = {c.pk: c.public_id for c in Claim.objects.filter(pk__in=pks)}
    return [public[pk] for pk in pks], {public[pk]: c for pk, c in cover.items()}


def _bridge_lexical(snap: Snapshot, query: str, k: int = 10) -> tuple[list[str], dict[str, float]]:
    rowids, cover = snap._lexical(query, k, timezone.now(), None, None, None)
    ids = dict(snap.db.execute("SELECT rowid, id FROM claims"))
    return [ids[r] for r in rowids], {ids[r]: c for r, c in cover.items()}


@pytest.mark.parametrize("query", QUERIES)
def test_it_returns_the_bridges_lexical_list_and_top_10(
    fleet_a: Fleet, snapshot: Snapshot, query: str
) -> None:
    server, server_cover = _server_lexical(fleet_a, query)
    bridge, bridge_cover = _bridge_lexical(snapshot, query)
    assert server == bridge
    assert server_cover == pytest.approx(bridge_cover, abs=1e-12)
    found = search.search_claims(fleet_a, query, method="lexical").claims
    hits = snapshot.search(query, k=10)
    assert [c.public_id for c in found] == [h["id"] for h in hits.results]


def test_it_scores_exactly_as_fts5_does(fleet_a: Fleet, snapshot: Snapshot) -> None:
    """Same floats, not merely the same order: FTS5's bm25() against the formula the SQL
    computes (mcp_bridge.contract.bm25.score) over the server's stored statistics."""
    rows = snapshot.db.execute(
        f"SELECT c.id, -{bm25.SQL_BM25} FROM claims_fts JOIN claims c ON c.rowid = "
        "claims_fts.rowid WHERE claims_fts MATCH '\"cache\" OR \"server\"'").fetchall()
    bridge = dict(rows)
    terms = ClaimTerm.objects.filter(fleet=fleet_a, term__in=["cach", "server"],
                                     claim__status="promoted").select_related("claim")
    assert {t.claim.public_id for t in terms} == set(bridge)
    stats = search.collection_stats(fleet_a, ["promoted"])
    docs = {c.public_id: c for c in search.collection(fleet_a, ["promoted"])}
    cut = dict(zip(docs, bm25.tokens((c.text, c.subject) for c in docs.values()), strict=True))
    dfs = [sum(1 for t in cut.values() if any(t.phrase_counts((w,)))) for w in ("cach", "server")]
    for public_id, score in bridge.items():
        freqs = [bm25.weighted(cut[public_id].phrase_counts((w,))) for w in ("cach", "server")]
        mine = bm25.score(freqs, dfs, docs[public_id].lexical_length, stats.claims, stats.avgdl)
        assert mine == score


def test_it_keeps_the_terms_of_a_saved_bulk_created_and_edited_claim(
    fleet_a: Fleet, fleet_mod: User
) -> None:
    claim = Claim.objects.create(fleet=fleet_a, text="Running tests", subject="ci",
                                 type="fact", text_hash=text_hash("x"))
    assert _terms(claim) == {"run": (1, 0), "test": (1, 0), "ci": (0, 1)}
    assert Claim.objects.get(pk=claim.pk).lexical_length == 3

    loaded = Claim.objects.get(pk=claim.pk)
    before = set(ClaimTerm.objects.filter(claim=claim).values_list("pk", flat=True))
    loaded.confidence = 0.9
    loaded.save()  # the text did not change: its terms are not rewritten
    assert set(ClaimTerm.objects.filter(claim=claim).values_list("pk", flat=True)) == before

    edited = moderation.edit_claim(loaded, by=fleet_mod, text="Tests run in Docker, tests hang")
    assert _terms(edited) == {"test": (2, 0), "run": (1, 0), "in": (1, 0), "docker": (1, 0),
                              "hang": (1, 0), "ci": (0, 1)}
    assert Claim.objects.get(pk=claim.pk).lexical_length == 7

    loaded = Claim.objects.get(pk=claim.pk)
    loaded.subject = "docker"
    loaded.save(update_fields=["subject"])
    assert _terms(loaded)["docker"] == (1, 1)
    assert Claim.objects.get(pk=claim.pk).lexical_length == 7

    [made] = Claim.objects.bulk_create([Claim(fleet=fleet_a, number=99, text="Cafés naïvely",
                                              subject="i18n", type="fact",
                                              text_hash=text_hash("y"))])
    assert _terms(made) == {"cafe": (1, 0), "naiv": (1, 0), "i18n": (0, 1)}


def test_a_new_claims_terms_are_inserted_without_a_delete_and_a_rewrite_replaces_them(
    fleet_a: Fleet,
) -> None:
    """A claim inserted in this transaction has no term rows yet: its write issues no DELETE
    (one statement fewer per proposal). A row saved again by id, or upserted, still has its
    old terms replaced (the unique (claim, term) constraint would refuse a second copy)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as made:
        claim = Claim.objects.create(fleet=fleet_a, text="Running tests", subject="ci",
                                     type="fact", text_hash=text_hash("x"))
        [bulk] = Claim.objects.bulk_create([Claim(fleet=fleet_a, number=98, text="Docker hangs",
                                                  subject="ci", type="fact",
                                                  text_hash=text_hash("y"))])
    deletes = [q["sql"] for q in made.captured_queries if q["sql"].startswith("DELETE")]
    assert deletes == []
    assert _terms(claim) == {"run": (1, 0), "test": (1, 0), "ci": (0, 1)}
    assert _terms(bulk) == {"docker": (1, 0), "hang": (1, 0), "ci": (0, 1)}

    again = Claim(pk=claim.pk, fleet=fleet_a, number=claim.number, text="Tests hang",
                  subject="ci", type="fact", text_hash="")
    again.save()  # given an id: Django updates the row, whose terms are replaced
    assert _terms(claim) == {"test": (1, 0), "hang": (1, 0), "ci": (0, 1)}

    Claim.objects.bulk_create(
        [Claim(fleet=fleet_a, number=98, text="Docker runs", subject="ci", type="fact",
               text_hash=text_hash("z"))],
        update_conflicts=True, unique_fields=["fleet", "number"], update_fields=["text"],
    )
    assert _terms(bulk) == {"docker": (1, 0), "run": (1, 0), "ci": (0, 1)}


def test_it_counts_retired_and_new_claims_as_the_snapshot_does(
    fleet_a: Fleet, corpus: list[Claim], fleet_mod: User, tmp_path: Path
) -> None:
    """Retracting a claim takes it out of N and df (the snapshot holds promoted claims
    only); a new promoted claim comes in; an edit moves the terms. Both sides still agree."""
    moderation.retract_claim(corpus[1], by=fleet_mod, note="wrong")
    Claim.objects.create(fleet=fleet_a, text="Cache the cache of the cache server.",
                         subject="cache", type="fact", scope="fleet", status="promoted",
                         promoted_at=timezone.now(), text_hash=text_hash("z"))
    snap = _render(fleet_a, tmp_path)
    stats = search.collection_stats(fleet_a, ["promoted"])
    assert stats.claims == snap.count == len(TEXTS)  # one retracted, one added
    assert stats.terms == sum(c.lexical_length for c in Claim.objects.promoted()
                              .filter(fleet=fleet_a))
    for query in QUERIES:
        server, server_cover = _server_lexical(fleet_a, query)
        assert (server, server_cover) == _bridge_lexical(snap, query), query
        assert "cc-02" not in server


def test_index_claims_rebuilds_lost_terms_with_progress(
    fleet_a: Fleet, corpus: list[Claim]
) -> None:
    want = {c.pk: _terms(c) for c in corpus}
    ClaimTerm.objects.all().delete()
    Claim.objects.update(lexical_length=0)
    out = StringIO()
    call_command("index_claims", stdout=out)
    assert "Dry run" in out.getvalue() and not ClaimTerm.objects.exists()
    call_command("index_claims", commit=True, stdout=out)
    assert f"{len(corpus) + 1}/{len(corpus) + 1} claims" in out.getvalue()
    assert {c.pk: _terms(c) for c in corpus} == want
    assert all(c.lexical_length for c in Claim.objects.all())


def _terms(claim: Claim) -> dict[str, tuple[int, int]]:
    return {t: (a, b) for t, a, b in ClaimTerm.objects.filter(claim=claim)
            .values_list("term", "text_count", "subject_count")}

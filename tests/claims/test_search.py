"""Server-side hybrid search: fusion, filters, validity, staleness, paraphrases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from claims import search
from claims.models import Claim
from claims.search import collection_size, factors, search_claims
from fleet.models import Fleet
from mcp_bridge.contract import ranking
from tests.claims.searchdata import promoted

ROWS = [
    {
        "text": "The payments service rounds refunds to the nearest cent before calling Stripe.",
        "subject": "payments",
    },
    {
        "text": "Run the integration tests with a local Redis, or they hang on connect.",
        "subject": "tests",
    },
    {
        "text": "Deploys to staging need the VPN; the deploy script times out without it.",
        "subject": "deploy",
    },
    {
        "text": "Database migrations must be reversible; CI runs them backwards too.",
        "subject": "migrations",
    },
]


def _ids(found: object) -> list[str]:
    return [c.public_id for c in found.claims]  # type: ignore[attr-defined]


def test_it_finds_a_paraphrase_with_no_shared_words(fleet_a: Fleet) -> None:
    promoted(fleet_a, ROWS)
    found = search_claims(fleet_a, "why does my cache server connection stall in testing")
    assert found.mode == "hybrid"
    assert _ids(found)[0] == "cc-02"


def test_lexical_and_vector_ranks_fuse_by_the_shared_function(fleet_a: Fleet) -> None:
    promoted(fleet_a, ROWS)
    found = search_claims(fleet_a, "refunds rounding", k=3)
    top = found.claims[0]
    assert top.public_id == "cc-01" and top.lexical_rank == 1 and top.vector_rank == 1
    expected = ranking.score(1, 1, ranking.Factors(top.confidence, 1.0, 0.0))
    assert abs(top.rank - expected) < 1e-4


def test_single_methods_use_one_list(fleet_a: Fleet) -> None:
    promoted(fleet_a, ROWS)
    # a paraphrase well above ranking.MIN_COSINE ("…server stall" alone sits at 0.19-0.20)
    query = "why does my cache server connection stall in testing"
    lexical = search_claims(fleet_a, query, method="lexical")
    vector = search_claims(fleet_a, query, method="vector")
    assert lexical.mode == "lexical" and all(c.vector_rank is None for c in lexical.claims)
    assert vector.mode == "vector" and all(c.lexical_rank is None for c in vector.claims)
    assert _ids(vector)[0] == "cc-02"


def test_superseded_and_expired_claims_leave_default_results_but_stay(fleet_a: Fleet) -> None:
    old, expired, new, _ = promoted(
        fleet_a,
        [
            {"text": "Deploys use the fabric script in tools/deploy.py.", "subject": "deploy"},
            {"text": "Deploys are frozen during the October release.", "subject": "deploy"},
            {"text": "Deploys use the GitHub Actions deploy workflow.", "subject": "deploy"},
            {"text": "Unrelated: the linter is ruff.", "subject": "style"},
        ],
    )
    Claim.objects.filter(pk=old.pk).update(superseded_by=new)
    Claim.objects.filter(pk=expired.pk).update(valid_until=timezone.now() - timedelta(days=1))
    assert _ids(search_claims(fleet_a, "how do deploys work")) == [new.public_id]
    everything = search_claims(fleet_a, "how do deploys work", include_inactive=True)
    assert set(_ids(everything)) == {old.public_id, expired.public_id, new.public_id}
    assert Claim.objects.filter(pk__in=[old.pk, expired.pk]).count() == 2


def test_a_future_valid_until_keeps_the_claim(fleet_a: Fleet) -> None:
    (claim,) = promoted(fleet_a, [{"text": "Deploys are frozen this week.", "subject": "deploy"}])
    Claim.objects.filter(pk=claim.pk).update(valid_until=timezone.now() + timedelta(days=2))
    assert _ids(search_claims(fleet_a, "deploy freeze")) == [claim.public_id]


def test_a_stale_claim_ranks_below_an_equal_fresh_one_and_is_labelled(fleet_a: Fleet) -> None:
    stale, fresh = promoted(
        fleet_a,
        [
            {"text": "The importer skips rows with an empty SKU column.", "subject": "importer"},
            {"text": "The importer skips rows with an empty SKU column!", "subject": "importer"},
        ],
    )
    Claim.objects.filter(pk=stale.pk).update(staleness=0.5)
    found = search_claims(fleet_a, "importer empty SKU rows")
    assert _ids(found) == [fresh.public_id, stale.public_id]
    assert [c.stale for c in found.claims] == [False, True]
    assert found.claims[1].rank < found.claims[0].rank


def test_filters_narrow_both_lists(fleet_a: Fleet, fleet_b: Fleet) -> None:
    promoted(fleet_a, ROWS)
    promoted(fleet_b, ROWS)
    found = search_claims(fleet_a, "tests redis", subject="TESTS")
    assert _ids(found) == ["cc-02"]
    assert all(c.fleet_id == fleet_a.pk for c in found.claims)
    assert search_claims(fleet_a, "tests redis", claim_type="decision").claims == []
    assert search_claims(fleet_a, "tests redis", scope="agent").claims == []


def test_only_promoted_by_default(fleet_a: Fleet) -> None:
    (claim,) = promoted(fleet_a, ROWS[:1])
    Claim.objects.filter(pk=claim.pk).update(status="proposed", scope="agent", promoted_at=None)
    assert search_claims(fleet_a, "refunds").claims == []
    assert _ids(search_claims(fleet_a, "refunds", statuses=["proposed"])) == ["cc-01"]


def test_a_query_of_punctuation_finds_nothing_and_does_not_fail(fleet_a: Fleet) -> None:
    promoted(fleet_a, ROWS)
    assert search_claims(fleet_a, "!!! ???").claims == []


COMMON = [
    {"text": f"The {what} tests run on every pull request.", "subject": "tests"}
    for what in ("unit", "integration", "smoke", "contract", "browser")
]


def test_any_term_hits_weigh_by_their_idf_weighted_query_coverage(fleet_a: Fleet) -> None:
    """No claim has both words, so every hit is an any-term hit; the one matching the rare
    word covers most of the query and outranks the ones sharing only the common word, and
    document frequencies count superseded claims too (the snapshot holds them)."""
    rare = {"text": "The clippy gate fails on any compiler warning.", "subject": "ci"}
    gone = {"text": "Old: clippy ran only on main.", "subject": "ci"}
    claims = promoted(fleet_a, [*COMMON, rare, gone])
    Claim.objects.filter(pk=claims[-1].pk).update(superseded_by=claims[-2])
    now = timezone.now()
    found = search_claims(fleet_a, "clippy tests", k=10, method="lexical", now=now)
    assert _ids(found)[0] == "cc-06"
    assert "cc-07" not in _ids(found)
    df, n = {"clippy": 2, "tests": 5}, 7
    expected = {
        "cc-06": ranking.lexical_weight(ranking.coverage(["clippy", "tests"], {"clippy"}, df, n)),
        "cc-01": ranking.lexical_weight(ranking.coverage(["clippy", "tests"], {"tests"}, df, n)),
    }
    by_id = {c.public_id: c for c in found.claims}
    for public_id, weight in expected.items():
        claim = by_id[public_id]
        f = factors(claim, now)
        assert claim.rank == ranking.score(claim.lexical_rank, None, f, lexical_weight=weight)
    # A filter narrows the results, not the document frequencies.
    narrowed = search_claims(fleet_a, "clippy tests", subject="ci", method="lexical", now=now)
    assert _ids(narrowed) == ["cc-06"]
    top = narrowed.claims[0]
    wanted = ranking.score(
        top.lexical_rank, None, factors(top, now), lexical_weight=expected["cc-06"]
    )
    assert top.rank == wanted
    everything = search_claims(fleet_a, "clippy tests", method="lexical", include_inactive=True)
    assert "cc-07" in _ids(everything)


def test_idfs_collection_size_is_counted_at_most_once_a_ttl(
    fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    promoted(fleet_a, ROWS[:2])
    assert collection_size(fleet_a, ["promoted"]) == 2
    promoted(fleet_a, ROWS[2:])
    assert collection_size(fleet_a, ["promoted"]) == 2  # reused within SIZE_TTL
    monkeypatch.setattr(search, "SIZE_TTL", 0.0)
    assert collection_size(fleet_a, ["promoted"]) == 4

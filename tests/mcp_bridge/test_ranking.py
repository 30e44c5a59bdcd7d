from __future__ import annotations

from mcp_bridge.contract import ranking
from mcp_bridge.contract.ranking import Factors

SAME = Factors(confidence=1.0, age_days=0.0, staleness=0.0)


def test_it_fuses_by_weighted_reciprocal_rank() -> None:
    fused = ranking.fuse(["a", "b", "c"], ["c", "b"], {k: SAME for k in "abc"})
    lexical, vector = ranking.LEXICAL_WEIGHT, ranking.VECTOR_WEIGHT
    expected = {"a": lexical * ranking.rrf(1),
                "b": lexical * ranking.rrf(2) + vector * ranking.rrf(2),
                "c": lexical * ranking.rrf(3) + vector * ranking.rrf(1)}
    assert dict(fused) == expected
    assert [cid for cid, _ in fused] == sorted(expected, key=lambda c: -expected[c])
    assert ranking.rrf(1) == 1 / (ranking.RRF_K + 1) and ranking.rrf(None) == 0.0


def test_it_weighs_confidence_recency_and_staleness() -> None:
    factors = {"sure": SAME, "unsure": Factors(0.5, 0.0, 0.0), "old": Factors(1.0, 3650, 0.0),
               "stale": Factors(1.0, 0.0, 0.5)}
    scores = dict(ranking.fuse(["sure", "unsure", "old", "stale"], [], factors))
    assert scores["unsure"] < scores["sure"]
    assert scores["old"] < scores["sure"] and scores["old"] > 0
    assert scores["stale"] < scores["sure"]


def test_it_bounds_recency_by_the_floor() -> None:
    assert ranking.recency(0) == 1.0
    assert abs(ranking.recency(ranking.RECENCY_HALF_LIFE_DAYS) - 0.75) < 1e-9
    assert ranking.recency(10**6) >= ranking.RECENCY_FLOOR


def test_it_drops_stopwords_unless_nothing_else_is_left() -> None:
    assert ranking.query_terms("How do we deploy the Docker image?") == ["deploy", "docker",
                                                                         "image"]
    assert ranking.query_terms("the the") == ["the"]
    assert ranking.query_terms("!!!") == []


def test_coverage_is_the_idf_weighted_share_of_the_query_terms() -> None:
    terms, df, n = ["rustflags", "tests"], {"rustflags": 1, "tests": 40}, 100
    rare = ranking.coverage(terms, {"rustflags"}, df, n)
    common = ranking.coverage(terms, {"tests"}, df, n)
    assert abs(rare + common - 1.0) < 1e-12
    assert rare > 0.75 and common < 0.25  # the rare word carries most of the query
    assert ranking.coverage(terms, set(terms), df, n) == 1.0
    assert ranking.coverage(terms, set(), df, n) == 0.0
    assert ranking.coverage([], set(), {}, n) == 0.0


def test_a_term_no_claim_matches_still_counts_in_the_whole() -> None:
    terms = ["checkout", "forever"]
    assert ranking.coverage(terms, {"checkout"}, {"checkout": 3, "forever": 0}, 100) < 0.5


def test_lexical_votes_weigh_coverage_to_the_power() -> None:
    same = ranking.Factors(1.0, 0.0, 0.0)
    cover = {"most": 0.8, "little": 0.2}
    fused = dict(
        ranking.fuse(
            ["all", "most", "little"], [], dict.fromkeys(cover | {"all": 1}, same), coverage=cover
        )
    )
    lexical = ranking.LEXICAL_WEIGHT
    assert fused["all"] == lexical * ranking.rrf(1)  # not in `coverage`: conjunctive, full weight
    assert fused["most"] == lexical * 0.8**ranking.COVERAGE_POWER * ranking.rrf(2)
    assert fused["little"] == lexical * 0.2**ranking.COVERAGE_POWER * ranking.rrf(3)
    assert ranking.lexical_weight(1.5) == ranking.lexical_weight(1.0) == ranking.LEXICAL_WEIGHT
    assert ranking.lexical_weight(-1.0) == 0.0


def test_a_one_common_word_hit_cannot_displace_the_vector_head_but_a_covering_one_can() -> None:
    same = ranking.Factors(1.0, 0.0, 0.0)
    factors = {k: same for k in ("top", "x", "hit")}

    def head(cov: float, vector: list[str]) -> str:
        return ranking.fuse(["hit"], vector, factors, coverage={"hit": cov})[0][0]

    # a paraphrase sharing one common word with a claim the embedder does not find
    assert head(0.2, ["top", "x"]) == "top"
    assert head(0.9, ["top", "x"]) == "hit"  # the query's rare words: the lexical vote decides
    # both lists agreeing on a claim outweighs one list's head (weighted RRF)
    assert head(0.2, ["top", "x", "hit"]) == "hit"


def test_it_drops_the_rest_of_postgres_english_stopwords() -> None:
    assert ranking.query_terms("why can't I rebuild it myself") == ["rebuild"]

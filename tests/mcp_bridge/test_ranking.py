from __future__ import annotations

from mcp_bridge import ranking
from mcp_bridge.ranking import Factors

SAME = Factors(confidence=1.0, age_days=0.0, staleness=0.0)


def test_it_fuses_by_reciprocal_rank() -> None:
    fused = ranking.fuse(["a", "b", "c"], ["c", "b"], {k: SAME for k in "abc"})
    assert [cid for cid, _ in fused] == ["c", "b", "a"]  # 1/63 + 1/61 > 2/62 > 1/61
    assert dict(fused)["b"] == ranking.rrf(2) + ranking.rrf(2)
    assert dict(fused)["a"] == ranking.rrf(1)


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

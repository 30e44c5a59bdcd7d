"""bench/usefulness_sim.py on a small synthetic fleet: the loop works end to end (real
snapshot files, the real search, the real rule), and planted-wrong claims sink further than
correct ones. The figures themselves belong to the bench (docs/benchmarks.md)."""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType

import pytest

from mcp_bridge import testing
from tests.helpers import bench_module

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    return bench_module("usefulness_sim")


def small_dataset(sim: ModuleType) -> object:
    """100 synthetic claims; each of the first 60 is the answer to a query of 3 of its words."""
    rng = random.Random(3)
    rows = testing.synthetic_claims(100, seed=3)
    docs = [{"id": r["id"], "text": r["text"], "group": ""} for r in rows]
    queries = [{"id": f"q{i}", "query": " ".join(rng.sample(r["text"].split()[1:], 3)),
                "relevant": {r["id"]: 1}} for i, r in enumerate(rows[:60])]
    return sim.retrieval_dev.Dataset("synthetic", docs, queries)


def test_it_sinks_the_planted_wrong_claims_and_not_the_correct_ones(sim: ModuleType) -> None:
    world = sim.world_from(small_dataset(sim), claims=100, wrong=0.2, queries=None, seed=1)
    assert len(world.texts) == 100 and len(world.queries) == 60 and len(world.wrong) == 12
    params = sim.Params(sessions=(0, 100, 200), render_every=25)

    points = sim.simulate(world, params)

    assert [p.sessions for p in points] == [0, 100, 200]
    first, last = points[0], points[-1]
    assert first.conf_wrong == first.conf_correct == pytest.approx(0.8)  # not punished up front
    assert last.conf_wrong < first.conf_wrong - 0.1
    assert last.conf_correct > last.conf_wrong + 0.1
    assert last.out > first.out
    assert last.mrr >= 0.9 * first.mrr
    assert last.flags_wrong > 0


def test_the_curve_and_verdict_name_the_targets(sim: ModuleType) -> None:
    point = sim.Point(0, left=0.0, out=0.1, mrr=0.8, conf_wrong=0.8, conf_correct=0.8,
                      flags_wrong=0, flags_correct=0, rate=0.75)
    after = sim.Point(500, left=0.95, out=0.96, mrr=0.79, conf_wrong=0.3, conf_correct=0.8,
                      flags_wrong=4, flags_correct=1, rate=0.75)
    assert "| 500 | 95.0% | 96.0% | 0.7900 | -1.25% |" in sim.curve([point, after])
    left_ok, mrr_ok, text = sim.verdict([point, after])
    assert (left_ok, mrr_ok) == (True, False)
    assert "95.0% of cases (target ≥ 90%): met" in text

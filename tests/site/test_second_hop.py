"""bench/second_hop.py's diverse variant: maximal marginal relevance re-orders the first
search's top MMR_POOL and leaves the rest as they were. Its figures belong to the bench
(docs/search.md)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def hop(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # search_eval, which second_hop imports, puts the repository and bench/ on sys.path:
    # on a copy, given back after the test, so bench's module names shadow nothing later
    monkeypatch.setattr(sys, "path", [str(BENCH), *sys.path])
    return importlib.import_module("second_hop")


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_look_alike_of_a_placed_result_gives_way_to_a_different_one(hop: ModuleType) -> None:
    first = [("a", 1.0), ("b", 0.95), ("c", 0.9), ("d", 0.5)]
    vectors = {"a": unit(1, 0), "b": unit(1, 0.01), "c": unit(0, 1), "d": unit(0.01, 1)}
    # b: 0.7 · 0.95 − 0.3 · ~1 ≈ 0.365 against c: 0.7 · 0.9 − 0 = 0.63
    assert hop.diverse(first, vectors) == ["a", "c", "b", "d"]


def test_results_unlike_each_other_keep_their_order(hop: ModuleType) -> None:
    first = [("a", 1.0), ("b", 0.9), ("c", 0.8)]
    vectors = {"a": unit(1, 0, 0), "b": unit(0, 1, 0), "c": unit(0, 0, 1)}
    assert hop.diverse(first, vectors) == ["a", "b", "c"]


def test_only_the_pool_is_reordered(hop: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hop, "MMR_POOL", 2)
    first = [("a", 1.0), ("b", 0.95), ("c", 0.9), ("d", 0.5)]
    vectors = {"a": unit(1, 0), "b": unit(1, 0)}  # c and d lie beyond the pool: never looked up
    assert hop.diverse(first, vectors) == ["a", "b", "c", "d"]
    assert hop.diverse([], {}) == []

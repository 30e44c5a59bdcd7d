"""Reading Postgres' EXPLAIN (ANALYZE, FORMAT JSON) plans in tests that pin a query's shape."""

from __future__ import annotations

from typing import Any


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan, the root first."""
    return [plan, *(node for child in plan.get("Plans", []) for node in nodes(child))]


def range_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The index scans bounded by a row of `unnest(…) AS r(low, high)`: one per range."""
    return [node for node in nodes(plan) if "r.low" in node.get("Index Cond", "")]


def rows_thrown_away(plan: dict[str, Any]) -> float:
    """Rows every node read and threw away, over all its loops (EXPLAIN gives a loop's
    mean)."""
    return sum(float(v) * node.get("Actual Loops", 1) for node in nodes(plan)
               for k, v in node.items() if k.startswith("Rows Removed"))

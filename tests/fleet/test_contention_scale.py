"""Contention found through the literal-prefix index agrees with comparing every pair.

The indexed paths (leases.contention_among, leases.contended_pairs in SQL, the roster
render, REST status and GET leases) are checked against the definition — every pair of
live leases of different agents whose globs overlap — on random fleets of globs that
stress the prefix filter (empty prefixes, SQL wildcards, shared and nested prefixes,
non-ASCII), and on a fleet of thousands of leases. Functional checks, not timings.
"""

from __future__ import annotations

import random
from datetime import timedelta
from itertools import combinations
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from fleet import api_roster, cache_render, leases
from fleet.globs import literal_prefix, overlaps, prefixes_of, start_ranges
from fleet.models import Agent, Fleet, Lease
from tests import plans
from tests.fleet.conftest import ApiAs

SEGMENTS = ["src", "lib", "a_b", "a%b", "ü", "*", "?x", "**", "[ab]", "s", "src2"]


def _random_glob(rng: random.Random) -> str:
    parts = [rng.choice(SEGMENTS) for _ in range(rng.randint(1, 4))]
    glob = "/".join(parts)
    return glob if glob.strip("/") else "src"


def _fleet_of(fleet: Fleet, paths: list[tuple[str, str]], *, expired: int = 0) -> list[Lease]:
    """Live leases (agent name, path); the first `expired` of them already expired."""
    agents = {name: Agent.objects.get_or_create(fleet=fleet, agent_id=name)[0]
              for name, _ in paths}
    now = timezone.now()
    rows = [
        Lease(fleet=fleet, agent=agents[name], path=path, prefix=literal_prefix(path),
              acquired_at=now - timedelta(hours=2),
              expires_at=now + (timedelta(hours=-1) if i < expired else timedelta(hours=1)))
        for i, (name, path) in enumerate(paths)
    ]
    return Lease.objects.bulk_create(rows)


def _every_pair(live: list[Lease]) -> set[tuple[int, int]]:
    return {
        (min(a.pk, b.pk), max(a.pk, b.pk))
        for a, b in combinations(live, 2)
        if a.agent_id != b.agent_id and overlaps(a.path, b.path)
    }


@pytest.mark.parametrize("seed", range(6))
def test_indexed_contention_finds_exactly_the_overlapping_pairs(
    seed: int, fleet_a: Fleet
) -> None:
    rng = random.Random(seed)
    paths = list({(rng.choice("abcd"), _random_glob(rng)) for _ in range(120)})
    created = _fleet_of(fleet_a, paths, expired=10)
    now = timezone.now()
    live = list(Lease.objects.active(at=now).filter(fleet=fleet_a).select_related("agent")
                .order_by("agent__agent_id", "path"))
    assert len(live) == len(created) - 10
    expected = _every_pair(live)
    assert expected  # the random fleet does overlap
    in_python = leases.contention_among(live)
    assert {(min(c.mine.pk, c.theirs.pk), max(c.mine.pk, c.theirs.pk))
            for c in in_python} == expected
    assert len(in_python) == len(expected)  # each pair once
    position = {lease.pk: i for i, lease in enumerate(live)}
    assert all(position[c.mine.pk] < position[c.theirs.pk] for c in in_python)
    assert set(leases.contended_pairs(fleet_a.pk, now=now)) == expected
    # what one lease sees (GET leases' page) is its share of the same pairs
    for mine in rng.sample(live, 15):
        seen = {c.theirs.pk for c in leases.overlapping(fleet_a.pk, [mine], now=now)}
        assert seen == {b if a == mine.pk else a for a, b in expected if mine.pk in (a, b)}


def test_the_roster_render_lists_the_same_pairs_in_the_same_order(fleet_a: Fleet) -> None:
    rng = random.Random(9)
    _fleet_of(fleet_a, list({(rng.choice("abc"), _random_glob(rng)) for _ in range(80)}))
    now = timezone.now()
    live = list(Lease.objects.active(at=now).filter(fleet=fleet_a).select_related("agent")
                .order_by("agent__agent_id", "path"))
    rendered = cache_render.render_roster(fleet_a, now=now)["contention"]
    assert [(c["agents"], c["paths"]) for c in rendered] == [
        ([c.mine.agent.agent_id, c.theirs.agent.agent_id], [c.mine.path, c.theirs.path])
        for c in leases.contention_among(live)
    ]


@pytest.fixture
def crowded(fleet_a: Fleet) -> Fleet:
    """One agent holding 3,000 leases (no overlaps among them), two others overlapping a
    few of them, and one agent with a couple of leases of its own."""
    paths = [("hoarder", f"src/m{i}/**") for i in range(3000)]
    paths += [("ada", "src/m7/x.py"), ("ada", "src/m2999/y.py"), ("bo", "src/m7/*.py")]
    paths += [("cy", "docs/readme.md"), ("cy", "docs/guide.md")]
    _fleet_of(fleet_a, paths)
    return fleet_a


def test_a_fleet_of_thousands_of_leases_renders_its_contention(crowded: Fleet) -> None:
    rendered = cache_render.render_roster(crowded, now=timezone.now())
    pairs = sorted((tuple(c["agents"]), tuple(c["paths"])) for c in rendered["contention"])
    assert pairs == [
        (("ada", "bo"), ("src/m7/x.py", "src/m7/*.py")),
        (("ada", "hoarder"), ("src/m2999/y.py", "src/m2999/**")),
        (("ada", "hoarder"), ("src/m7/x.py", "src/m7/**")),
        (("bo", "hoarder"), ("src/m7/*.py", "src/m7/**")),
    ]
    held = {a["agent_id"]: len(a["leases"]) for a in rendered["agents"]}
    assert held == {"ada": 2, "bo": 1, "cy": 2, "hoarder": 3000}


def test_rest_status_and_leases_stay_bounded_and_right_with_thousands_of_leases(
    crowded: Fleet, api_as: ApiAs
) -> None:
    client = api_as(crowded, "operator")
    status = client.get(f"/api/v1/fleets/{crowded.slug}/status").json()
    assert status["contended_leases"] == 5  # ada's two, bo's one, hoarder's m7 and m2999
    assert status["truncated"] is True  # 3,005 leases, MAX_LEASES listed
    listed = {a["agent_id"]: a["leases"] for a in status["agents"]}
    assert sum(len(v) for v in listed.values()) == api_roster.MAX_LEASES
    # every agent's first leases come before a hoarder's 500th: the small holders show whole
    assert [lease["path"] for lease in listed["cy"]] == ["docs/guide.md", "docs/readme.md"]
    assert [lease["path"] for lease in listed["bo"]] == ["src/m7/*.py"]
    (bo_lease,) = listed["bo"]
    assert [(o["agent_id"], o["path"]) for o in bo_lease["contended_by"]] == [
        ("ada", "src/m7/x.py"),
        ("hoarder", "src/m7/**"),
    ]
    page = client.get(f"/api/v1/fleets/{crowded.slug}/leases?limit=5").json()
    assert len(page["results"]) == 5
    for lease in page["results"]:
        expected = {"src/m7/x.py": 2, "src/m7/*.py": 2, "src/m2999/y.py": 1}.get(lease["path"], 0)
        assert len(lease["contended_by"]) == expected, lease["path"]
    contended = client.get(f"/api/v1/fleets/{crowded.slug}/leases?limit=200").json()
    by_path = {lease["path"]: lease["contended_by"] for lease in contended["results"]}
    assert {o["agent_id"] for o in by_path["src/m7/x.py"]} == {"bo", "hoarder"}


def _rows_removed(plan: dict[str, Any]) -> int:
    """Rows every node of an EXPLAIN ANALYZE plan read and threw away, summed."""
    removed = sum(int(v) for k, v in plan.items() if k.startswith("Rows Removed"))
    return removed + sum(_rows_removed(c) for c in plan.get("Plans", []))


def test_contended_pairs_visits_a_range_per_lease_whatever_the_statistics(
    fleet_a: Fleet,
) -> None:
    """Statistics taken while the fleet held no live lease, then 600 live ones: the
    candidates still come from one prefix range per lease. As a plain join, the planner
    took the live leases as one row and compared each lease with all 600 (360,000 rows
    read and thrown away here; 18.6 s at 10k leases in a bench)."""
    with connection.cursor() as cur:
        cur.execute("ANALYZE fleet_lease")
    n = 600
    _fleet_of(fleet_a, [(f"agent-{i % 50}", f"bench/{i % 50}/{i}.py") for i in range(n)])
    now = timezone.now()
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + leases._CANDIDATE_PAIRS,
                    [now, fleet_a.pk, now])
        (plan,) = cur.fetchone()[0]
    assert _rows_removed(plan["Plan"]) <= 2 * n
    assert leases.contended_pairs(fleet_a.pk, now=now) == []  # own files: no overlap


def test_holders_scan_a_range_per_prefix_even_in_a_generic_plan(fleet_a: Fleet) -> None:
    """The drain asks for the holders under 200 prefixes at once, and after a few runs the
    statement is prepared: Postgres may then plan it once for any arrays (a generic plan,
    forced here). Each prefix must still be an index range scan, not a test of every
    live lease against every prefix (the OR-ed LIKEs this replaced tested each of 1,600
    live leases against 200 patterns per batch: 12 ms of pipeline_bench's 3 s drain).

    With statistics of the leases as they are (autovacuum's ANALYZE; taken while the
    table was empty, they make Postgres filter every live lease per range, about what the
    LIKEs cost: a state autovacuum ends after the first 50 rows), and of the agents taken
    while the fleet had few: joined freely, Postgres then ran every range once per agent.
    """
    n = 600
    Agent.objects.create(fleet=fleet_a, agent_id="agent-0")
    with connection.cursor() as cur:
        cur.execute("ANALYZE fleet_agent")
    _fleet_of(fleet_a, [(f"agent-{i % 50}", f"src/m{i}/**") for i in range(n)])
    with connection.cursor() as cur:
        cur.execute("ANALYZE fleet_lease")
    asked = {f"src/m{i}/" for i in range(0, 2 * n, 3)} | {"docs/"}  # half held, half not
    now = timezone.now()
    ranges = start_ranges(asked)
    assert ranges is not None
    starts = sorted({s for low in ranges.lows for s in prefixes_of(low)} - set(ranges.lows))
    sql = leases._HOLDERS_NEAR
    for i, name in enumerate(["fleet", "at", "starts", "lows", "highs"], 1):
        sql = sql.replace(f"%({name})s", f"${i}")
    connection.ensure_connection()
    # PREPARE's own $n parameters: sent as plain text, not as a statement bound on the server
    with psycopg.ClientCursor(connection.connection) as cur:
        cur.execute(f"PREPARE holders(smallint, timestamptz, text[], text[], text[]) AS {sql}")
        try:
            cur.execute("SET plan_cache_mode = force_generic_plan")
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE holders(%s, %s, %s, %s, %s)",
                        [fleet_a.pk, now, starts, ranges.lows, ranges.highs])
            (plan,) = cur.fetchone()[0]
        finally:
            cur.execute("RESET plan_cache_mode")
            cur.execute("DEALLOCATE holders")
    by_range = plans.range_scans(plan["Plan"])
    assert by_range and all(node["Actual Loops"] == len(ranges.lows) for node in by_range)
    assert plans.rows_thrown_away(plan["Plan"]) <= n  # at most one pass, for the starts
    found = leases._holders_under(fleet_a.pk, asked, now)
    assert sorted(lease.path for lease in found) == sorted(
        f"src/m{i}/**" for i in range(0, n, 3))

"""Path-scoped recall: claiming paths brings up the fleet's claims about those paths."""

from __future__ import annotations

import datetime as dt

from mcp_bridge import testing, tools
from mcp_bridge.config import Config
from mcp_bridge.contract import ranking
from mcp_bridge.testing import claim, iso

NOW = dt.datetime.now(dt.UTC)
CLAIMS = [
    claim(
        "cc-01",
        "Refunds round to the cent before the Stripe call.",
        subject="payments",
        evidence_paths=["src/payments/refunds.py"],
        confidence=0.9,
    ),
    claim("cc-02", "Webhook handlers must be idempotent.", subject="payments", confidence=0.6),
    claim(
        "cc-03",
        "The old refund path is gone.",
        subject="payments",
        evidence_paths=["src/payments/legacy.py"],
        superseded_by="cc-01",
    ),
    claim(
        "cc-04",
        "The frontend builds with pnpm.",
        subject="frontend",
        evidence_paths=["web/package.json"],
    ),
    claim(
        "cc-05",
        "Refund retries changed last week.\u200b",
        subject="billing",
        evidence_paths=["src/payments/retry.py"],
        stale=True,
        staleness=0.5,
    ),
    claim(
        "cc-06",
        "Expired advice about payments.",
        subject="payments",
        evidence_paths=["src/payments/x.py"],
        valid_until=iso(NOW - dt.timedelta(days=1)),
    ),
]


def _bridge(config: Config, memory_mode: str = "live") -> tools.Bridge:
    testing.build_cache(
        config.cache_dir, config.fleet, claims=CLAIMS, vectors=None, memory_mode=memory_mode
    )
    return tools.Bridge.from_config(config)


def test_claiming_paths_returns_the_related_claims_attributed(config: Config) -> None:
    out = tools.fleet_claim(_bridge(config), ["src/payments/**"], "refactor refunds")
    assert out["status"] == "queued for sync"
    ids = [c["id"] for c in out["related_claims"]]
    # path match 0.9; subject only 0.8 × 0.6 = 0.48; a stale path match 0.8 × 0.5 = 0.40
    assert ids == ["cc-01", "cc-02", "cc-05"]
    assert out["related_claims"][0]["attribution"].startswith("[cc-01, ")
    assert "POSSIBLY STALE" in out["related_claims"][2]["attribution"]
    assert "\u200b" not in out["related_rendered"]  # sanitised like every other result
    assert out["related_rendered"].startswith(tools.render.HEADING)


def test_superseded_expired_and_unrelated_claims_stay_out(config: Config) -> None:
    out = tools.fleet_claim(_bridge(config), ["src/payments/refunds.py", "docs/**"], "fix")
    assert "cc-03" not in {c["id"] for c in out["related_claims"]}
    assert {"cc-04", "cc-06"}.isdisjoint(c["id"] for c in out["related_claims"])


def test_nothing_related_or_memory_not_live_adds_nothing(config: Config) -> None:
    assert "related_claims" not in tools.fleet_claim(_bridge(config), ["infra/**"], "terraform")
    shadow = _bridge(config, memory_mode="shadow")
    assert "related_claims" not in tools.fleet_claim(shadow, ["src/payments/**"], "refactor")


def test_no_snapshot_still_queues_the_lease(config: Config) -> None:
    bridge = tools.Bridge.from_config(config)
    out = tools.fleet_claim(bridge, ["src/payments/**"], "refactor")
    assert out["status"] == "queued for sync" and "related_claims" not in out


def test_path_relations_build_on_the_lease_rules() -> None:
    """Covering itself is mcp_bridge.contract.globs (test_glob_agreement asks every caller)."""
    assert ranking.path_related("src/payments/api.py", "src/payments")  # a directory claim
    assert not ranking.path_related("src/pay", "src/payments/api.py")
    assert ranking.subject_related("src/payments/**", "Payments")
    assert not ranking.subject_related("src/payments/**", "src")  # too generic to mean much
    assert ranking.path_match(["**/*.md"], "docs", ["README.md"]) == ranking.PATH_WEIGHT


def test_path_recall_reads_a_bounded_number_of_rows_however_big_the_tree(tmp_path) -> None:
    """fleet_claim of `src/**` over 2,000 claims under src/ examines PATH_CANDIDATES rows."""
    from mcp_bridge import snapshot as snapshot_module
    from mcp_bridge import testing

    claims = [testing.claim(f"cc-{i:04d}", f"claim {i}", confidence=0.5 + (i % 50) / 100,
                            evidence_paths=[f"src/m{i}/x.py"]) for i in range(2000)]
    root = testing.build_cache(tmp_path, "big", claims=claims, vectors=None)
    snap = snapshot_module.Snapshot(root / "snapshot.sqlite", fleet="big")
    assert len(snap._path_candidates(["src/**"])) == snapshot_module.PATH_CANDIDATES
    found = snap.for_paths(["src/**"], k=3)
    assert [f["confidence"] for f in found] == sorted((f["confidence"] for f in found),
                                                      reverse=True)
    assert found[0]["confidence"] == max(c["confidence"] for c in claims)
    assert snap.for_paths(["src/m7/**"], k=3)[0]["id"] == "cc-0007"


def test_one_matcher_over_many_claims_answers_as_each_pattern_alone() -> None:
    """ranking.PathMatcher cuts each pattern's names once; its answer for every claim is
    the per-pattern rule's (a path cited → PATH_WEIGHT, else any pattern the subject
    relates to → SUBJECT_WEIGHT)."""
    import random

    rng = random.Random(7)
    parts = ["src", "payments", "api.py", "docs", "README.md", "tests", "billing", "*",
             "**", "pay*", "x.py", "Payments", "web", "lib", ".", "..", "", "p?y", "[ab]",
             "src\\lib"]

    def path() -> str:
        # leading slashes, "./", trailing slashes, ".." and empty segments: BadPaths and
        # canonical forms must answer as path_related answers them
        body = "/".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))
        return rng.choice(["", "", "", "./", "/", " "]) + body + rng.choice(["", "", "/"])

    def by_pattern(patterns: list[str], subject: str, paths: list[str]) -> float:
        if any(ranking.path_related(p, c) for p in patterns for c in paths):
            return ranking.PATH_WEIGHT
        if any(ranking.subject_related(p, subject) for p in patterns):
            return ranking.SUBJECT_WEIGHT
        return 0.0

    weights = set()
    for _ in range(600):
        patterns = [path() for _ in range(rng.randint(1, 6))]
        match = ranking.PathMatcher(patterns)
        for _ in range(20):
            subject = rng.choice([path(), rng.choice(parts), "", " Payments ", "src"])
            paths = [path() for _ in range(rng.randint(0, 2))]
            expected = by_pattern(patterns, subject, paths)
            assert match(subject, paths) == expected == ranking.path_match(
                patterns, subject, paths), (patterns, subject, paths)
            weights.add(expected)
    assert weights == {0.0, ranking.SUBJECT_WEIGHT, ranking.PATH_WEIGHT}  # all three seen


def test_one_matcher_looks_a_cited_path_up_not_once_per_lease(monkeypatch) -> None:
    """A briefing asks about every claim's cited paths with ~1,000 leases held: literal
    leases are found by set lookups, and only the leases with wildcards are matched one by
    one (the render of a lease change spent seconds in a million covers/holds calls)."""
    leases = [f"src/pkg{i % 60}/mod{i}.py" for i in range(1000)] + ["docs/**/*.md"]
    cited = [[f"src/pkg{n % 60}/mod{n}.py"] for n in range(0, 2000, 10)]  # half leased
    cited += [["src/pkg3"], ["src/pkg3/mod3.py/"], ["docs/a/b.md"], ["x/y.py"], ["/abs"]]
    expected = [ranking.PATH_WEIGHT if any(ranking.path_related(p, c) for p in leases)
                else 0.0 for (c,) in cited]
    calls: list[str] = []

    def counted(fn):  # type: ignore[no-untyped-def]
        def wrapped(*args):  # type: ignore[no-untyped-def]
            calls.append(fn.__name__)
            return fn(*args)
        return wrapped

    monkeypatch.setattr(ranking, "covers", counted(ranking.covers))
    monkeypatch.setattr(ranking, "holds", counted(ranking.holds))
    match = ranking.PathMatcher(leases)
    assert [match("subject", paths) for paths in cited] == expected
    assert expected.count(ranking.PATH_WEIGHT) == 100 + 3  # the directory, the slash, the glob
    assert len(calls) <= len(cited)  # at most the one glob lease per path, never 1,001

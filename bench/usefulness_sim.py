"""Simulate a fleet using its memory: do planted-wrong claims sink, and do correct ones stay?

Issue 24's "done when": 1,000 promoted claims, 10 % planted wrong; simulated sessions are
served claims for their queries, succeed or fail following the planted truth and give
feedback at a realistic rate; afterwards the planted-wrong claims have left the top 5 of
their queries in ≥ 90 % of cases and the MRR of the correct claims is within 1 % of before.

The fleet (public data read at run time from --data, default ../shared/retrieval-dev
beside the repository, never copied into it; bench/retrieval_dev.py):

- claims: every SciFact (train) abstract relevant to one of the --queries queries (all 809
  by default: 565 abstracts), filled up to --claims with other abstracts (seeded). A
  query's relevant abstracts are "its" claims; --wrong of those query-claims are planted
  wrong (seeded). Every claim starts alike: one evidence session, the same age.
- a session: a query drawn uniformly (seeded) and an agent of --agents; the real
  Snapshot.search(query, k=5) on the latest rendered snapshot.sqlite (hybrid, the query's
  vector from the real embedder; --lexical for words only). All five are *served*. The
  session *uses* the first served claim relevant to its query, else the top one (an agent
  that finds nothing better tries what it was given first), else nothing.
- its outcome: failed with --p-fail-wrong if it used a planted-wrong claim, else with
  --p-fail (sessions fail for many reasons); otherwise success.
- feedback: after using a wrong claim the agent says "wrong" with --p-feedback (most
  agents never report); after using a correct one, spuriously, with --p-spurious.
- the moderator: every --review-every sessions (1,000 by default; 0: never) works the
  feedback tasks and dismisses the flags on correct claims, which restores them
  (claims.usefulness.resolve_feedback). A flag on a planted-wrong claim is left open: a
  moderator would retract the claim, which takes it out of every ranking, and what is
  measured here is what the ranking learns by itself.

Tallies are kept as the server keeps them (claims/tallies.py): served = sessions shown the
claim, used, succeeded / failed among the used, flags = distinct agents with an open
wrong feedback; confidence = mcp_bridge.contract.usefulness.confidence(Record, base_rate(
the fleet's outcome counts so far)). Every --render-every sessions the snapshot is written
again with the new confidences (mcp_bridge.testing.build_cache, a real file) and reopened,
as the server re-renders.

Measured at each checkpoint on the snapshot sessions then see, for every query:

- wrong left top 5: of the (query, its planted-wrong claim) cases in the top 5 before any
  session, the share no longer in it (the target, ≥ 90 %); "wrong out" counts every case;
- MRR@10 of the correct claims: 1 / rank of the query's first relevant correct claim,
  over the queries that have one (the target: ≥ 99 % of the value before);
- the mean confidence of the wrong and of the correct query-claims, and the open flags.

Then the same fleet and sessions again up to the last checkpoint with one thing changed:
the previous rule (usefulness as the ratio of a Beta posterior to the fleet's rate: the
baseline, measured in the same run), no moderator, and --p-feedback 0 / 0.05 / 0.3 (how
much comes from outcomes alone). What-ifs, in this process only and printed: --prior-bad,
--bad-share, --useful-floor and --flag-as-failed override the rule's constants.

Exit status 1 unless both targets are met at the last checkpoint. The first run embeds
the 1,000 abstracts (about a minute on two cores; cached outside the repository after).

    .venv/bin/python bench/usefulness_sim.py [--checkpoints 0,250,...,16000] [--lexical]
        [--seed 1] [--no-comparisons] [--review-every 1000] [--previous-rule] [--data DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import retrieval_dev  # noqa: E402

from mcp_bridge import contract, testing  # noqa: E402
from mcp_bridge.contract import usefulness as rule  # noqa: E402
from mcp_bridge.snapshot import Snapshot  # noqa: E402

FLEET = "usesim"
CHECKPOINTS = (0, 250, 500, 1000, 2000, 4000, 8000, 16000)
SENSITIVITY = (0.0, 0.05, 0.1, 0.3)
TARGET_LEFT = 0.90
TARGET_MRR = 0.99
SERVED_K = 5
EVAL_K = 10
#: The rule's constants a what-if may override (flag → module attribute).
OVERRIDES = {"prior_bad": "PRIOR_BAD", "bad_share": "BAD_SHARE",
             "useful_floor": "USEFUL_FLOOR", "flag_as_failed": "FLAG_AS_FAILED"}
PREVIOUS_PRIOR = 4.0  # the previous rule's pseudo-sessions
PREVIOUS_FLAG_FACTOR, PREVIOUS_FLAG_FLOOR = 0.5, 0.25  # and its flags: halved per agent


@dataclass(frozen=True)
class Params:
    sessions: tuple[int, ...] = CHECKPOINTS  # checkpoints; the last is the run's length
    render_every: int = 50
    p_fail_wrong: float = 0.7
    p_fail: float = 0.2
    p_feedback: float = 0.1
    p_spurious: float = 0.01
    agents: int = 20
    seed: int = 1
    review_every: int = 1000  # a moderator works the feedback queue every N sessions; 0: never
    previous_rule: bool = False  # the rule before this one (a Beta posterior's ratio to the rate)


@dataclass
class World:
    """The simulated fleet: claims (id → text), queries and which claims are planted wrong."""

    texts: dict[str, str]
    queries: list[dict[str, Any]]  # {"id", "query", "relevant": set of claim ids, "vector"}
    wrong: set[str]
    vectors: Any = None  # (claims × dims) in the order of `texts`, or None: lexical only

    def query_claims(self) -> set[str]:
        return {c for q in self.queries for c in q["relevant"]}


@dataclass
class Tally:
    served: int = 0
    used: int = 0
    succeeded: int = 0
    failed: int = 0
    flaggers: set[int] = field(default_factory=set)

    def record(self) -> rule.Record:
        return rule.Record(evidence_sessions=1, served=self.served, used=self.used,
                           succeeded=self.succeeded, failed=self.failed,
                           flags=len(self.flaggers))


@dataclass(frozen=True)
class Point:
    sessions: int
    left: float  # of the wrong cases in the top 5 before, the share out of it now
    out: float  # of all wrong cases, the share out of the top 5
    mrr: float
    conf_wrong: float
    conf_correct: float
    flags_wrong: int  # open flags on planted-wrong claims
    flags_correct: int
    rate: float
    dismissed: int = 0  # spurious flags a moderator has dismissed so far
    never_used: int = 0  # of the wrong cases in the top 5 before, claims no session used yet


# -- the fleet ---------------------------------------------------------------------------------


def world_from(ds: retrieval_dev.Dataset, *, claims: int, wrong: float, queries: int | None,
               seed: int, qvecs: Any = None) -> World:
    """Claims = the relevant docs of the first `queries` queries (seeded order) that fit in
    `claims`, filled with other docs; `wrong` of the query-claims planted wrong."""
    rng = random.Random(f"{seed}-world")
    order = list(range(len(ds.queries)))
    rng.shuffle(order)
    chosen: list[int] = []
    relevant: set[str] = set()
    for i in order[:queries]:
        docs = set(ds.queries[i]["relevant"])
        if len(relevant | docs) <= claims:
            chosen.append(i)
            relevant |= docs
    rest = sorted(d["id"] for d in ds.docs if d["id"] not in relevant)
    ids = relevant | set(rng.sample(rest, max(0, min(len(rest), claims - len(relevant)))))
    texts = {d["id"]: d["text"] for d in ds.docs if d["id"] in ids}
    qs = [{"id": ds.queries[i]["id"], "query": ds.queries[i]["query"],
           "relevant": set(ds.queries[i]["relevant"]),
           "vector": None if qvecs is None else qvecs[i]} for i in sorted(chosen)]
    planted = set(rng.sample(sorted(relevant), round(wrong * len(relevant))))
    return World(texts, qs, planted)


def scifact(base: Path, *, claims: int, wrong: float, queries: int | None, seed: int,
            hybrid: bool) -> World:
    from mcp_bridge.contract import embed  # loads its model on the first embed() only

    ds = retrieval_dev.load(base, "scifact")
    qvecs = None
    if hybrid:
        qvecs = retrieval_dev.vectors(embed, [q["query"] for q in ds.queries], "scifact-queries")
    w = world_from(ds, claims=claims, wrong=wrong, queries=queries, seed=seed, qvecs=qvecs)
    if hybrid:
        w.vectors = retrieval_dev.vectors(embed, list(w.texts.values()), "usesim-scifact-docs")
    return w


# -- rendering and searching -------------------------------------------------------------------


def render(world: World, confidence: dict[str, float], cache: Path) -> Snapshot:
    """Write the fleet's cache with every claim's confidence now, through the test writer
    that follows docs/cache-format.md, and open the snapshot as the bridge does."""
    rows = [testing.claim(cid, text, independent_sessions=1, confidence=confidence[cid])
            for cid, text in world.texts.items()]
    root = testing.build_cache(cache, FLEET, claims=rows, vectors=world.vectors)
    return Snapshot(root / contract.SNAPSHOT, fleet=FLEET)


def search(snap: Snapshot, query: dict[str, Any], k: int) -> list[str]:
    return [h["id"] for h in snap.search(query["query"], k=k,
                                         query_vector=query["vector"]).results]


def ratio_confidence(r: rule.Record, rate: float) -> float:
    """The previous rule, measured beside the shipped one in the same run (--previous-rule
    alone): usefulness as the ratio of a Beta posterior (4 pseudo-sessions at the fleet's
    rate) to the fleet's rate, same bounds."""
    n = r.succeeded + r.partial + r.failed
    posterior = (r.succeeded + 0.5 * r.partial + PREVIOUS_PRIOR * rate) / (n + PREVIOUS_PRIOR)
    useful = min(rule.USEFUL_CEILING, max(rule.USEFUL_FLOOR, posterior / rate))
    flags = max(PREVIOUS_FLAG_FLOOR, PREVIOUS_FLAG_FACTOR ** r.flags)
    value = (rule.evidence(r.evidence_sessions) * useful * flags
             * (rule.CONTESTED_FACTOR if r.contested else 1.0))
    return round(min(1.0, max(0.0, value)), 3)


# -- sessions ----------------------------------------------------------------------------------


class Fleet:
    """The simulation's state: per-claim tallies, the fleet's outcomes, the open snapshot."""

    def __init__(self, world: World, params: Params, cache: Path) -> None:
        self.world, self.params, self.cache = world, params, cache
        self.tallies = {cid: Tally() for cid in world.texts}
        self.outcomes: Counter[str] = Counter()
        self.pick = random.Random(f"{params.seed}-queries")  # same queries whatever else varies
        self.dice = random.Random(f"{params.seed}-outcomes")
        self.served: dict[str, list[str]] = {}  # query id → results on this snapshot
        self.dismissed = 0
        self.snap = render(world, self.confidence(), cache)

    def rate(self) -> float:
        return rule.base_rate(dict(self.outcomes))

    def confidence(self) -> dict[str, float]:
        """Every claim's confidence, as the server derives it (claims/tallies.py)."""
        rate = self.rate()
        derive = ratio_confidence if self.params.previous_rule else rule.confidence
        return {cid: derive(t.record(), rate) for cid, t in self.tallies.items()}

    def rerender(self) -> None:
        self.snap.close()
        self.snap = render(self.world, self.confidence(), self.cache)
        self.served.clear()

    def session(self) -> None:
        query = self.pick.choice(self.world.queries)
        agent = self.pick.randrange(self.params.agents)
        if query["id"] not in self.served:
            self.served[query["id"]] = search(self.snap, query, SERVED_K)
        shown = self.served[query["id"]]
        for cid in shown:
            self.tallies[cid].served += 1
        used = next((c for c in shown if c in query["relevant"]), shown[0] if shown else None)
        wrong = used in self.world.wrong
        failed = self.dice.random() < (self.params.p_fail_wrong if wrong else self.params.p_fail)
        self.outcomes["failed" if failed else "success"] += 1
        if used is None:
            return
        tally = self.tallies[used]
        tally.used += 1
        tally.failed += failed
        tally.succeeded += not failed
        if self.dice.random() < (self.params.p_feedback if wrong else self.params.p_spurious):
            tally.flaggers.add(agent)


    def review(self) -> None:
        """A moderator works the feedback queue: a flag on a correct claim is dismissed,
        which restores the claim (claims.usefulness.resolve_feedback). A flag on a planted-
        wrong claim is left open: acting on it (retracting the claim) would take the claim
        out of every ranking, and the sim measures what the ranking learns by itself."""
        for cid, tally in self.tallies.items():
            if tally.flaggers and cid not in self.world.wrong:
                self.dismissed += len(tally.flaggers)
                tally.flaggers.clear()


def measure(fleet: Fleet, sessions: int, before: dict[str, list[str]] | None
            ) -> tuple[Point, dict[str, list[str]]]:
    """Search every query on the current snapshot; the Point against `before` (the ranking
    at session 0; None: this is it)."""
    w = fleet.world
    ranked = {q["id"]: search(fleet.snap, q, EVAL_K) for q in w.queries}
    before = before or ranked
    cases = [(q["id"], c) for q in w.queries for c in sorted(q["relevant"] & w.wrong)]
    was_in = [(qid, c) for qid, c in cases if c in before[qid][:SERVED_K]]
    recips = [_recip(ranked[q["id"]], q["relevant"] - w.wrong)
              for q in w.queries if q["relevant"] - w.wrong]
    conf = fleet.confidence()
    correct = w.query_claims() - w.wrong
    point = Point(
        sessions,
        left=_share([c not in ranked[qid][:SERVED_K] for qid, c in was_in]),
        out=_share([c not in ranked[qid][:SERVED_K] for qid, c in cases]),
        mrr=statistics.fmean(recips) if recips else 0.0,
        conf_wrong=_mean(conf[c] for c in w.wrong),
        conf_correct=_mean(conf[c] for c in correct),
        flags_wrong=sum(len(fleet.tallies[c].flaggers) for c in w.wrong),
        flags_correct=sum(len(t.flaggers) for c, t in fleet.tallies.items() if c not in w.wrong),
        rate=fleet.rate(), dismissed=fleet.dismissed,
        never_used=sum(1 for _, c in was_in if not fleet.tallies[c].used))
    return point, ranked


def _recip(ranked: list[str], correct: set[str]) -> float:
    return next((1.0 / (i + 1) for i, c in enumerate(ranked) if c in correct), 0.0)


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _mean(values: Any) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def simulate(world: World, params: Params) -> list[Point]:
    """Run sessions up to the last checkpoint; the Points at each checkpoint."""
    cache = Path(tempfile.mkdtemp(prefix="usesim-"))
    try:
        fleet = Fleet(world, params, cache)
        first, before = measure(fleet, 0, None)
        points = [first] if 0 in params.sessions else []
        for n in range(1, max(params.sessions) + 1):
            fleet.session()
            if params.review_every and n % params.review_every == 0:
                fleet.review()
            if n % params.render_every == 0:
                fleet.rerender()
            if n in params.sessions:
                if n % params.render_every:
                    fleet.rerender()
                points.append(measure(fleet, n, before)[0])
        fleet.snap.close()
        return points
    finally:
        shutil.rmtree(cache, ignore_errors=True)


# -- report ------------------------------------------------------------------------------------


def curve(points: list[Point]) -> str:
    head = ("| sessions | wrong left top 5 | wrong out of top 5 (all cases) | MRR@10 correct | "
            "Δ MRR | mean conf wrong / correct | open flags wrong / correct | dismissed | "
            "wrong never used | fleet rate |")
    rows = [head, "| " + " | ".join(["---"] * 10) + " |"]
    mrr0 = points[0].mrr
    for p in points:
        rows.append(f"| {p.sessions:,} | {p.left:.1%} | {p.out:.1%} | {p.mrr:.4f} | "
                    f"{_delta(p.mrr, mrr0)} | {p.conf_wrong:.3f} / {p.conf_correct:.3f} | "
                    f"{p.flags_wrong} / {p.flags_correct} | {p.dismissed} | {p.never_used} | "
                    f"{p.rate:.3f} |")
    return "\n".join(rows)


def _delta(value: float, base: float) -> str:
    return f"{(value / base - 1):+.2%}" if base else "—"


def verdict(points: list[Point]) -> tuple[bool, bool, str]:
    first, last = points[0], points[-1]
    left_ok = last.left >= TARGET_LEFT
    mrr_ok = last.mrr >= TARGET_MRR * first.mrr
    text = (f"after {last.sessions:,} sessions: wrong claims left the top 5 in {last.left:.1%} "
            f"of cases (target ≥ {TARGET_LEFT:.0%}): {'met' if left_ok else 'NOT met'}; "
            f"MRR@10 of the correct claims {last.mrr:.4f} against {first.mrr:.4f} before "
            f"({_delta(last.mrr, first.mrr)}; target within 1 %): "
            f"{'met' if mrr_ok else 'NOT met'}")
    return left_ok, mrr_ok, text


def comparisons(world: World, params: Params, main: list[Point]) -> str:
    """The same fleet and sessions to the last checkpoint with one thing changed: the
    previous rule (the baseline, measured in this run), no moderator, other feedback rates."""
    rows = ["| variant | wrong left top 5 | wrong out (all) | MRR@10 correct | Δ MRR | "
            "open flags wrong / correct |", "| --- | --- | --- | --- | --- | --- |"]
    last = (0, max(params.sessions))
    variants = [("shipped rule (above)", None),
                ("previous rule (ratio to the fleet's rate)", replace(params, previous_rule=True)),
                ("shipped rule, no moderator", replace(params, review_every=0))]
    variants += [(f"shipped rule, p_feedback {p:g}", replace(params, p_feedback=p))
                 for p in SENSITIVITY if p != params.p_feedback]
    for name, variant in variants:
        points = main if variant is None else simulate(world, replace(variant, sessions=last))
        first, end = points[0], points[-1]
        rows.append(f"| {name} | {end.left:.1%} | {end.out:.1%} | {end.mrr:.4f} | "
                    f"{_delta(end.mrr, first.mrr)} | {end.flags_wrong} / {end.flags_correct} |")
    return "\n".join(rows)


def apply_overrides(args: argparse.Namespace) -> list[str]:
    """Set the rule's constants named on the command line (this process only)."""
    done = []
    for flag, name in OVERRIDES.items():
        value = getattr(args, flag)
        if value is not None:
            setattr(rule, name, value)
            done.append(f"{name} = {value:g}")
    return done


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="retrieval-dev folder (default ../shared/retrieval-dev)")
    p.add_argument("--claims", type=int, default=1000)
    p.add_argument("--queries", type=int, help="how many SciFact queries (default all)")
    p.add_argument("--wrong", type=float, default=0.10, help="share of query-claims planted")
    p.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)))
    p.add_argument("--render-every", type=int, default=Params.render_every)
    p.add_argument("--p-fail-wrong", type=float, default=Params.p_fail_wrong)
    p.add_argument("--p-fail", type=float, default=Params.p_fail)
    p.add_argument("--p-feedback", type=float, default=Params.p_feedback)
    p.add_argument("--p-spurious", type=float, default=Params.p_spurious)
    p.add_argument("--agents", type=int, default=Params.agents)
    p.add_argument("--review-every", type=int, default=Params.review_every, metavar="N",
                   help="a moderator dismisses the flags on correct claims every N sessions "
                        "(0: no moderator)")
    p.add_argument("--seed", type=int, default=Params.seed)
    p.add_argument("--lexical", action="store_true", help="words only: no embedder")
    p.add_argument("--no-comparisons", action="store_true",
                   help="skip the previous rule, no-moderator and p_feedback runs")
    p.add_argument("--previous-rule", action="store_true",
                   help="run the previous rule (ratio of a Beta posterior to the rate) instead")
    for flag, name in OVERRIDES.items():
        p.add_argument("--" + flag.replace("_", "-"), type=float,
                       help=f"override usefulness.{name} (now {getattr(rule, name):g})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    overrides = apply_overrides(args)
    params = Params(sessions=tuple(sorted({int(x) for x in args.checkpoints.split(",")})),
                    render_every=args.render_every, p_fail_wrong=args.p_fail_wrong,
                    p_fail=args.p_fail, p_feedback=args.p_feedback,
                    p_spurious=args.p_spurious, agents=args.agents, seed=args.seed,
                    review_every=args.review_every,
                    previous_rule=args.previous_rule)
    world = scifact(retrieval_dev.data_dir(args.data), claims=args.claims, wrong=args.wrong,
                    queries=args.queries, seed=args.seed, hybrid=not args.lexical)
    built = time.monotonic() - started
    points = simulate(world, params)
    print(f"usefulness_sim {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
          f"{'lexical' if args.lexical else 'hybrid'} search; seed {params.seed}")
    print(f"fleet: {len(world.texts)} SciFact claims, {len(world.queries)} queries, "
          f"{len(world.query_claims())} query-claims, {len(world.wrong)} planted wrong")
    print(f"params: {params}; rule overrides: {', '.join(overrides) or 'none'}")
    print(f"\n{curve(points)}\n")
    left_ok, mrr_ok, text = verdict(points)
    print(text)
    if not args.no_comparisons:
        print(f"\nat {max(params.sessions):,} sessions, one thing changed:\n"
              f"{comparisons(world, params, points)}")
    load = os.getloadavg()
    print(f"\nfleet built in {built:.0f}s; {time.monotonic() - started:.0f}s in all; load "
          f"average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)")
    return 0 if left_ok and mrr_ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Labelled retrieval evaluation of claim search: lexical, vector and hybrid, server and bridge.

Loads bench/data/claims.tsv (180 coding-agent claims over 15 subjects) into a throwaway
fleet, embeds them with the real embedder, renders the fleet's snapshot.sqlite with the
real renderer, and runs bench/data/queries.tsv through:

- server: claims.search.search_claims(method=lexical | vector | hybrid)
- bridge: mcp_bridge.snapshot.Snapshot.search without / with only / with both lists

The queries (graded 2 = answers it, 1 = related): 84 of the first evaluation, 13 keyword
and 71 paraphrases sharing few words with their answer, and 30 `identifier` queries added
afterwards (exact tokens an agent types: RUSTFLAGS, cache_bust, --no-verify; see
docs/search.md for how they were made).

Prints recall@5, recall@10, nDCG@10 (gain 2^grade − 1) and MRR, overall, per query kind
and for the original 84 (keyword+paraphrase), and exits 1 unless hybrid beats both single
methods on nDCG@10 on both paths, both over all queries and over the original 84. All
claims get the same confidence and age, so the factors do not move the comparison.

--cv chooses ranking.COVERAGE_POWER by 5-fold cross-validation over queries (stratified
by kind, 10 shuffles by default) and prints the held-out figures beside the in-sample
grid; it reports, it does not change the exit status.

    /work/main/.venv/bin/python bench/search_eval.py [--json] [--cv [--seeds N]]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from django.utils import timezone  # noqa: E402

from claims import embeddings, snapshot_render  # noqa: E402
from claims.models import Claim, text_hash  # noqa: E402
from claims.search import search_claims  # noqa: E402
from fleet.models import Fleet  # noqa: E402
from mcp_bridge.contract import embed, ranking  # noqa: E402
from mcp_bridge.snapshot import Snapshot  # noqa: E402

DATA = ROOT / "bench" / "data"
K = 10
METHODS = ("lexical", "vector", "hybrid")
KINDS = ("keyword", "paraphrase", "identifier")
ORIGINAL = "keyword+paraphrase"  # the 84 queries of the first evaluation
POWERS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)  # --cv grid, COVERAGE_POWER
FOLDS = 5
Search = Callable[[str, str], list[str]]


def load() -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    with open(DATA / "claims.tsv", newline="") as f:
        claims = list(csv.DictReader(f, delimiter="\t"))
    with open(DATA / "queries.tsv", newline="") as f:
        queries = []
        for row in csv.DictReader(f, delimiter="\t"):
            grades = dict(pair.split(":") for pair in row["relevant"].split(","))
            queries.append({**row, "relevant": {k: int(v) for k, v in grades.items()}})
    return claims, queries


def build_fleet(claims: list[dict[str, str]]) -> tuple[Fleet, dict[str, str]]:
    """A throwaway fleet holding the labelled claims, promoted and embedded."""
    fleet = Fleet.objects.create(
        slug=f"bench-eval-{uuid.uuid4().hex[:8]}", name="search eval", memory_mode="live"
    )
    now = timezone.now()
    rows = Claim.objects.bulk_create(
        Claim(
            fleet=fleet,
            number=i + 1,
            text=c["text"],
            type=c["type"],
            subject=c["subject"],
            scope="fleet",
            status="promoted",
            promoted_at=now,
            confidence=0.8,
            independent_sessions=1,
            text_hash=text_hash(c["text"]),
        )
        for i, c in enumerate(claims)
    )
    embeddings.embed_claims(Claim.objects.filter(fleet=fleet))
    public = {row.public_id: c["id"] for row, c in zip(rows, claims, strict=True)}
    return fleet, public


def server_search(fleet: Fleet, public: dict[str, str]) -> Search:
    def run(query: str, method: str) -> list[str]:
        found = search_claims(fleet, query, k=K, method=method)  # type: ignore[arg-type]
        return [public[c.public_id] for c in found.claims]

    return run


def bridge_search(snap: Snapshot, public: dict[str, str]) -> Search:
    def run(query: str, method: str) -> list[str]:
        vector = embed.embed_query(query) if method != "lexical" else None
        text = query if method != "vector" else ""  # no terms: no lexical list
        hits = snap.search(text, k=K, query_vector=vector)
        return [public[r["id"]] for r in hits.results]

    return run


def metrics(ranked: list[str], relevant: dict[str, int]) -> dict[str, float]:
    found = [cid for cid in ranked if cid in relevant]
    dcg = sum(
        (2 ** relevant[c] - 1) / math.log2(i + 2) for i, c in enumerate(ranked[:K]) if c in relevant
    )
    ideal = sorted(relevant.values(), reverse=True)[:K]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    first = next((i for i, c in enumerate(ranked) if c in relevant), None)
    return {
        "recall@5": len([c for c in ranked[:5] if c in relevant]) / len(relevant),
        "recall@10": len(found[:K]) / len(relevant),
        "ndcg@10": dcg / idcg,
        "mrr": 0.0 if first is None else 1.0 / (first + 1),
    }


Rows = dict[str, dict[str, list[dict[str, float]]]]  # path -> method -> per-query metrics


def run_all(paths: dict[str, Search], queries: list[dict[str, object]], methods=METHODS) -> Rows:  # type: ignore[no-untyped-def]
    """Per-query metrics, in query order, for every path and method."""
    return {
        name: {
            m: [metrics(run(str(q["query"]), m), q["relevant"]) for q in queries]  # type: ignore[arg-type]
            for m in methods
        }
        for name, run in paths.items()
    }


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {m: sum(r[m] for r in rows) / len(rows) for m in rows[0]}


def groups(queries: list[dict[str, object]]) -> dict[str, list[int]]:
    """Query indices per reported group: all, each kind, and the original 84 (the set the
    first evaluation had: keyword + paraphrase; identifier queries were added later)."""
    out = {"all": list(range(len(queries)))}
    for kind in KINDS:
        out[kind] = [i for i, q in enumerate(queries) if q["kind"] == kind]
    out[ORIGINAL] = [i for i, q in enumerate(queries) if q["kind"] in ("keyword", "paraphrase")]
    return {name: idx for name, idx in out.items() if idx}


def summarise(rows: Rows, index: list[int]) -> dict[str, dict[str, dict[str, float]]]:
    return {
        path: {m: mean([per_query[i] for i in index]) for m, per_query in by_method.items()}
        for path, by_method in rows.items()
    }


def beats(results: dict[str, dict[str, dict[str, float]]]) -> bool:
    return all(
        r["hybrid"]["ndcg@10"] > max(r["lexical"]["ndcg@10"], r["vector"]["ndcg@10"])
        for r in results.values()
    )


def table(results: dict[str, dict[str, dict[str, float]]], title: str) -> str:
    lines = [
        f"{title}",
        "| path | method | recall@5 | recall@10 | nDCG@10 | MRR |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for path, by_method in results.items():
        for method, m in by_method.items():
            lines.append(
                f"| {path} | {method} | {m['recall@5']:.3f} | {m['recall@10']:.3f} "
                f"| {m['ndcg@10']:.3f} | {m['mrr']:.3f} |"
            )
    return "\n".join(lines)


def folds(
    queries: list[dict[str, object]], universe: list[int], k: int, seed: int
) -> list[list[int]]:
    """k folds of the query indices in `universe`, stratified by kind."""
    rng = random.Random(seed)
    out: list[list[int]] = [[] for _ in range(k)]
    offset = 0
    for kind in KINDS:
        index = [i for i in universe if queries[i]["kind"] == kind]
        rng.shuffle(index)
        for j, i in enumerate(index):
            out[(offset + j) % k].append(i)
        offset += len(index)
    return [sorted(f) for f in out]


def per_power(paths: dict[str, Search], queries: list[dict[str, object]]) -> dict[float, Rows]:
    """Per-query rows of every method for each COVERAGE_POWER of the grid."""
    saved = ranking.COVERAGE_POWER
    vector = run_all(paths, queries, ("vector",))  # does not depend on the power
    out = {}
    try:
        for power in POWERS:
            ranking.COVERAGE_POWER = power
            rows = run_all(paths, queries, ("lexical", "hybrid"))
            out[power] = {p: {**vector[p], **rows[p]} for p in paths}
    finally:
        ranking.COVERAGE_POWER = saved
    return out


def cross_validate(
    by_power: dict[float, Rows], queries: list[dict[str, object]], universe: list[int], seeds: int
) -> list[tuple[list[float], Rows]]:
    """Choose COVERAGE_POWER on 4/5 of `universe`, rank the held-out 1/5 with it.

    The choice maximises the training queries' hybrid nDCG@10 summed over both paths (one
    constant serves both: they share ranking.py); ties go to the smaller power. The
    held-out rows of the 5 folds are pooled, so every query of the universe is scored
    once, ranked with a power chosen without it. Repeated for `seeds` shuffles; returns
    (powers chosen per fold, held-out rows) per shuffle, rows indexed like `queries`.
    """
    some = next(iter(by_power.values()))
    out = []
    for seed in range(seeds):
        held: Rows = {p: {m: [{}] * len(queries) for m in METHODS} for p in some}
        chosen = []
        for test in folds(queries, universe, FOLDS, seed):
            train = sorted(set(universe) - set(test))

            def fit(power: float, train: list[int] = train) -> tuple[float, float]:
                rows = by_power[power]
                total = sum(rows[p]["hybrid"][i]["ndcg@10"] for p in rows for i in train)
                return round(total, 9), -power

            best = max(POWERS, key=fit)
            chosen.append(best)
            for p in some:
                for m in METHODS:
                    for i in test:
                        held[p][m][i] = by_power[best][p][m][i]
        out.append((chosen, held))
    return out


def print_cv(by_power: dict[float, Rows], queries: list[dict[str, object]], seeds: int) -> None:
    index = groups(queries)
    vector = summarise(by_power[POWERS[0]], index["all"])["server"]["vector"]["ndcg@10"]
    print(f"In-sample hybrid nDCG@10 per COVERAGE_POWER (vector {vector:.3f} all queries)")
    names = [g for g in ("all", ORIGINAL, "paraphrase", "identifier") if g in index]
    print("| power | " + " | ".join(f"{p} {g}" for g in names for p in ("server", "bridge")) + " |")
    print("| --- |" + " --- |" * (2 * len(names)))
    for power, rows in by_power.items():
        cells = [
            f"{summarise(rows, index[g])[p]['hybrid']['ndcg@10']:.3f}"
            for g in names
            for p in ("server", "bridge")
        ]
        print(f"| {power:g} | " + " | ".join(cells) + " |")
    for universe in ("all", ORIGINAL):
        runs = cross_validate(by_power, queries, index[universe], seeds)
        counts = Counter(p for c, _ in runs for p in c)
        print(
            f"\n{FOLDS}-fold cross-validation over {universe} queries ({len(index[universe])}), "
            f"stratified by kind, {seeds} shuffles; power chosen (folds): "
            + ", ".join(f"{p:g} ({counts[p]})" for p in sorted(counts))
            + "\n"
        )
        inside = set(index[universe])
        for name in names:
            idx = [i for i in index[name] if i in inside]
            if not idx or (name == "all" and universe != "all"):
                continue
            shuffles = [summarise(held, idx) for _, held in runs]
            avg = {
                p: {
                    m: {
                        k: sum(s[p][m][k] for s in shuffles) / len(shuffles)
                        for k in shuffles[0][p][m]
                    }
                    for m in METHODS
                }
                for p in shuffles[0]
            }
            print(table(avg, f"held-out, mean of {seeds} shuffles, queries: {name} ({len(idx)})"))
            for p in avg:
                margins = [
                    s[p]["hybrid"]["ndcg@10"]
                    - max(s[p]["vector"]["ndcg@10"], s[p]["lexical"]["ndcg@10"])
                    for s in shuffles
                ]
                print(
                    f"  {p}: hybrid nDCG@10 minus the best single method, per shuffle: "
                    f"min {min(margins):+.3f} mean {sum(margins) / len(margins):+.3f} "
                    f"max {max(margins):+.3f}"
                )
            print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--cv",
        action="store_true",
        help=f"also choose COVERAGE_POWER by {FOLDS}-fold cross-validation "
        "and print held-out figures (does not change the exit status)",
    )
    parser.add_argument("--seeds", type=int, default=10, help="CV shuffles (default 10)")
    args = parser.parse_args()
    claims, queries = load()
    started = time.monotonic()
    fleet, public = build_fleet(claims)
    by_power = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "snapshot.sqlite"
            snapshot_render.write_snapshot(fleet, path, generated_at=timezone.now())
            snap = Snapshot(path, fleet=fleet.slug)
            paths = {"server": server_search(fleet, public), "bridge": bridge_search(snap, public)}
            rows = run_all(paths, queries)
            if args.cv:
                by_power = per_power(paths, queries)
            snap.close()
    finally:
        fleet.delete()
    out = {name: summarise(rows, idx) for name, idx in groups(queries).items()}
    kinds = {k: sum(1 for q in queries if q["kind"] == k) for k in KINDS}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"{len(claims)} claims, {len(queries)} queries ("
            + ", ".join(f"{n} {kind}" for kind, n in kinds.items())
            + f"); COVERAGE_POWER {ranking.COVERAGE_POWER:g}; "
            f"{time.monotonic() - started:.1f}s\n"
        )
        for kind, results in out.items():
            print(table(results, f"queries: {kind}") + "\n")
    if by_power is not None and not args.json:
        print_cv(by_power, queries, args.seeds)
    # Both the whole set and the original 84 (without the identifier queries added later).
    ok = beats(out["all"]) and beats(out[ORIGINAL])
    print(
        f"hybrid beats both single methods on nDCG@10 on both paths (all queries and {ORIGINAL}):",
        "yes" if ok else "NO",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Labelled retrieval evaluation of claim search: lexical, vector and hybrid, server and bridge.

Loads bench/data/claims.tsv (180 coding-agent claims over 15 subjects) into a throwaway
fleet, embeds them with the real embedder, renders the fleet's snapshot.sqlite with the
real renderer, and runs bench/data/queries.tsv (84 queries, most of them paraphrases
sharing few words with their answer; graded 2 = answers it, 1 = related) through:

- server: claims.search.search_claims(method=lexical | vector | hybrid)
- bridge: mcp_bridge.snapshot.Snapshot.search without / with only / with both lists

Prints recall@5, recall@10, nDCG@10 (gain 2^grade − 1) and MRR, overall and per query
kind, and exits 1 unless hybrid beats both single methods on nDCG@10 on both paths. All
claims get the same confidence and age, so the factors do not move the comparison.

    /work/main/.venv/bin/python bench/search_eval.py [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from django.utils import timezone  # noqa: E402

from claims import bridge as claims_bridge  # noqa: E402
from claims import embeddings  # noqa: E402
from claims.models import Claim, text_hash  # noqa: E402
from claims.search import search_claims  # noqa: E402
from fleet.models import Fleet  # noqa: E402
from mcp_bridge import embed  # noqa: E402
from mcp_bridge.snapshot import Snapshot  # noqa: E402

DATA = ROOT / "bench" / "data"
K = 10
METHODS = ("lexical", "vector", "hybrid")
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


def evaluate(
    search: Search, queries: list[dict[str, object]], method: str, kind: str | None = None
) -> dict[str, float]:
    chosen = [q for q in queries if kind is None or q["kind"] == kind]
    rows = [metrics(search(str(q["query"]), method), q["relevant"]) for q in chosen]  # type: ignore[arg-type]
    return {m: sum(r[m] for r in rows) / len(rows) for m in rows[0]}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    claims, queries = load()
    started = time.monotonic()
    fleet, public = build_fleet(claims)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "snapshot.sqlite"
            claims_bridge.write_snapshot(fleet, path, generated_at=timezone.now())
            snap = Snapshot(path, fleet=fleet.slug)
            paths = {"server": server_search(fleet, public), "bridge": bridge_search(snap, public)}
            out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
            for kind in (None, "keyword", "paraphrase"):
                out[kind or "all"] = {
                    name: {m: evaluate(run, queries, m, kind) for m in METHODS}
                    for name, run in paths.items()
                }
            snap.close()
    finally:
        fleet.delete()
    kinds = {k: sum(1 for q in queries if q["kind"] == k) for k in ("keyword", "paraphrase")}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"{len(claims)} claims, {len(queries)} queries ({kinds['keyword']} keyword, "
            f"{kinds['paraphrase']} paraphrase); {time.monotonic() - started:.1f}s\n"
        )
        for kind, results in out.items():
            print(table(results, f"queries: {kind}") + "\n")
    ok = all(
        r["hybrid"]["ndcg@10"] > max(r["lexical"]["ndcg@10"], r["vector"]["ndcg@10"])
        for r in out["all"].values()
    )
    print(
        "hybrid beats both single methods on nDCG@10 on both paths:",
        "yes" if ok else "NO",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

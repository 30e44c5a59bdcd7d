"""A second pass for harder questions (issue 29, item 4), measured before it may ship.

LoCoMo's multi-hop and open-domain questions need turns the question's own words do not
reach ("What fields would Caroline be likely to pursue?"). A pseudo-relevance step takes
the first search's top results as evidence of what the question is about and searches
again. Two forms, each with its constants fixed before measuring (none tuned):

- vector: Rocchio in embedding space, the query vector plus the mean of the first top
  HOP_DOCS results' vectors, re-normalised; the lexical list is kept.
- terms: the query plus the HOP_TERMS rarest words (highest summed idf) that the first
  top HOP_DOCS results share with at least one other claim; the vector list is kept.

And one re-ordering, no second search: multi-hop questions have answering turns on
different sides of the question, which a top 5 filled with turns alike in meaning misses.

- diverse: maximal marginal relevance over the first search's top MMR_POOL results: each
  next result is the one with the best MMR_LAMBDA · score / best score − (1 − MMR_LAMBDA)
  · its highest cosine to a result already placed; the rest keep their order.

The hops are ranked by the shipped fusion (mcp_bridge.contract.ranking.fuse); each
variant is compared with the first search, all from k=100 lists on the bridge path, per
LoCoMo category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop: the dataset's
numbering) and on SciFact, with 95 % paired-bootstrap intervals of variant − first. One
would ship only if it wins significantly on LoCoMo without significantly hurting SciFact.

    /work/main/.venv/bin/python bench/second_hop.py [--data DIR] [--sets locomo,scifact]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import retrieval_dev
import search_eval as se  # sets up Django and the path

from mcp_bridge import testing
from mcp_bridge.contract import embed, ranking
from mcp_bridge.snapshot import Snapshot

HOP_DOCS = 3  # first results taken as evidence
HOP_TERMS = 5  # words added to the query
MMR_POOL = 20  # first results the diverse variant re-orders
MMR_LAMBDA = 0.7  # relevance's share against redundancy (the usual 0.5–0.7)
CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
VARIANTS = ("first", "vector", "terms", "diverse")


def words(text: str) -> set[str]:
    return {t.lower() for t in ranking._TERM.findall(text)} - ranking.STOPWORDS


def expansion(query: str, top: list[str], text: dict[str, str], df: Counter[str],
              n: int) -> list[str]:
    """The HOP_TERMS rarest words the top results share with some other claim (df ≥ 2: a
    word only one claim uses leads nowhere), not already asked."""
    asked = set(ranking.query_terms(query))
    weight: Counter[str] = Counter()
    for cid in top:
        for w in words(text[cid]) - asked:
            if df[w] >= 2 and not w.isdigit():
                weight[w] += ranking.idf(df[w], n)
    return [w for w, _ in weight.most_common(HOP_TERMS)]


def fused(lexical: list[int], cover: dict[int, float], vector: list[int],
          ids: dict[int, str]) -> list[tuple[str, float]]:
    lex, vec = [ids[r] for r in lexical], [ids[r] for r in vector]
    factors = dict.fromkeys([*lex, *vec], se.UNIFORM)
    return ranking.fuse(lex, vec, factors, coverage={ids[r]: c for r, c in cover.items()})


def ranked(lexical: list[int], cover: dict[int, float], vector: list[int],
           ids: dict[int, str]) -> list[str]:
    return [c for c, _ in fused(lexical, cover, vector, ids)]


def diverse(first: list[tuple[str, float]], vector: dict[str, Any]) -> list[str]:
    """`first` re-ordered by maximal marginal relevance over its top MMR_POOL."""
    pool, placed = dict(first[:MMR_POOL]), []
    best = first[0][1] if first else 1.0
    while pool:
        def value(cid: str) -> float:
            alike = max((float(vector[cid] @ vector[p]) for p in placed), default=0.0)
            return MMR_LAMBDA * pool[cid] / best - (1 - MMR_LAMBDA) * alike
        placed.append(max(pool, key=value))
        del pool[placed[-1]]
    return placed + [c for c, _ in first[MMR_POOL:]]


def hops(snap: Snapshot, query: str, qvec: Any, subject: str | None,
         text: dict[str, str], df: Counter[str], n: int) -> dict[str, list[str]]:
    """The first search and each second hop, as ranked claim ids (k = 100 lists)."""
    now = dt.datetime.now(dt.UTC)
    ids = se._rowids(snap)
    row = {cid: r for r, cid in ids.items()}
    lex, cover = snap._lexical(query, se.DEEP, now, None, subject, None)
    vec = snap._vector(qvec, se.DEEP, now, None, subject, None)
    scored = fused(lex, cover, vec, ids)
    first = [c for c, _ in scored]
    top = first[:HOP_DOCS]
    matrix = snap.vectors()
    assert matrix is not None
    at = {int(r): i for i, r in enumerate(matrix.rowids)}
    unit = {c: matrix.matrix[at[row[c]]] for c, _ in scored[:MMR_POOL]}  # L2-normalised
    mean = np.mean([matrix.matrix[at[row[c]]] for c in top], axis=0) if top else 0.0
    moved = np.asarray(qvec, dtype=np.float32) + mean
    moved = moved / (np.linalg.norm(moved) or 1.0)
    vec2 = snap._vector(moved, se.DEEP, now, None, subject, None)
    extra = expansion(query, top, text, df, n)
    lex2, cover2 = (snap._lexical(f"{query} {' '.join(extra)}", se.DEEP, now, None, subject,
                                  None) if extra else (lex, cover))
    return {"first": first, "vector": ranked(lex, cover, vec2, ids),
            "terms": ranked(lex2, cover2, vec, ids), "diverse": diverse(scored, unit)}


def categories(base: Path, name: str) -> dict[str, str]:
    out = {}
    with open(base / name / "queries.jsonl") as f:
        for line in f:
            q = json.loads(line)
            out[str(q["_id"])] = str((q.get("metadata") or {}).get("category") or name)
    return out


def run_set(base: Path, name: str) -> dict[str, Any]:
    """Per query and variant the three metrics, and each query's category."""
    ds = retrieval_dev.load(base, name)
    matrix = retrieval_dev.vectors(embed, [d["text"] for d in ds.docs], f"{name}-docs")
    qvecs = retrieval_dev.vectors(embed, [q["query"] for q in ds.queries], f"{name}-queries")
    cats = categories(base, name)
    df: Counter[str] = Counter()
    for d in ds.docs:
        df.update(words(d["text"]))
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.sqlite"
        claims = [testing.claim(f"cc-{i + 1:02d}", d["text"], subject=d["group"] or "general")
                  for i, d in enumerate(ds.docs)]
        testing.write_snapshot(path, "eval", claims, vectors=matrix)
        snap = Snapshot(path, fleet="eval")
        label = {f"cc-{i + 1:02d}": d["id"] for i, d in enumerate(ds.docs)}
        text = {f"cc-{i + 1:02d}": d["text"] for i, d in enumerate(ds.docs)}
        for i, q in enumerate(ds.queries):
            found = hops(snap, q["query"], qvecs[i], q["group"] if ds.grouped else None,
                         text, df, len(ds.docs))
            for v, ids in found.items():
                docs = [label[c] for c in ids]
                rows[v].append(retrieval_dev.metrics(docs, q["relevant"]))
        snap.close()
    return {"rows": rows, "groups": [cats.get(q["id"], name) for q in ds.queries]}


def summary(name: str, result: dict[str, Any]) -> list[str]:
    rows, groups = result["rows"], result["groups"]
    lines = []
    for g in ["all", *sorted(set(groups))] if name == "locomo" else ["all"]:
        idx = [i for i, x in enumerate(groups) if g in ("all", x)]
        label = f"{name}/{CATEGORIES.get(g, g)}" if g != "all" else name
        for v in VARIANTS[1:]:
            cells = []
            for m in se.SHOWN:
                a = [rows["first"][i][m] for i in idx]
                b = [rows[v][i][m] for i in idx]
                d, lo, hi = retrieval_dev.paired_bootstrap(a, b)
                cells.append(f"{np.mean(a):.4f} → {np.mean(b):.4f} {d:+.4f} [{lo:+.3f}, "
                             f"{hi:+.3f}]")
            lines.append(f"| {label} ({len(idx)}) | {v} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="retrieval-dev folder")
    parser.add_argument("--sets", default="locomo,scifact")
    args = parser.parse_args()
    base = retrieval_dev.data_dir(args.data)
    started = time.monotonic()
    lines = ["| set (queries) | hop | nDCG@10 first → hop, hop − first [95 %] | recall@5 | "
             "recall@100 |", "| --- | --- | --- | --- | --- |"]
    for name in [s for s in args.sets.split(",") if s]:
        lines += summary(name, run_set(base, name))
    load = os.getloadavg()
    print(f"second hop: {HOP_DOCS} docs, {HOP_TERMS} terms; diverse: top {MMR_POOL}, "
          f"lambda {MMR_LAMBDA}; embedder {embed.NAME}; "
          f"{time.monotonic() - started:.0f}s; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

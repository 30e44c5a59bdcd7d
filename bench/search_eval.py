"""Labelled retrieval evaluation of claim search on the project's queries and people's queries.

Sets:

- project: bench/data/claims.tsv (180 coding-agent claims over 15 subjects) and
  bench/data/queries.tsv (114 queries graded 2 = answers it, 1 = related: 13 keyword, 71
  paraphrases, 30 identifiers an agent types: RUSTFLAGS, cache_bust, --no-verify). Loaded
  into a throwaway fleet, embedded with the real embedder, rendered with the real renderer:
  searched on both paths, server (Postgres) and bridge (snapshot.sqlite).
- scifact, locomo: public sets of natural-language queries written by people (SciFact
  train: 809 queries over 5,183 abstracts; LoCoMo: 760 questions over the turns of five
  conversations, each question searched within its conversation = the claims' subject).
  Read at run time from --data (default ../shared/retrieval-dev beside the repository;
  never copied into it: non-commercial licences), written to a snapshot.sqlite by
  mcp_bridge.testing and searched on the bridge path; --server also loads them into
  Postgres (minutes). Document vectors are cached outside the repository
  (bench/retrieval_dev.py).

Methods, per set and path, from the very candidate lists the search code computes:

- lexical: the project's lexical list alone (conjunctive, then any-term, weighted);
- vector: the embedder's cosine list alone;
- rrf: plain reciprocal-rank fusion, k=60, of BM25 (FTS5 on the bridge, the same formula
  in SQL on the server: mcp_bridge.contract.bm25) over any query term and the same vector
  list, equal weights;
- shipped: what search returns (mcp_bridge.contract.ranking.fuse, the one definition).

Prints nDCG@10 (gain 2^grade − 1: linear for the binary public qrels, as BEIR and
eval.py score), recall@5 and recall@100, each with its 95 % bootstrap interval (queries
resampled 2,000 times, the same resamples for every method: paired), then MRR@10, and
per set and path shipped − rrf with its paired interval: a figure whose interval holds 0
is no evidence of a difference. `shipped` is computed twice, offline from the captured
lists and by the real search call, and the two must agree.

--cv compares the candidate fusions (FAMILIES: RRF k=60 of the shipped lists, a lexical
weight only, a lexical weight and k, the three-constant weighted RRF; plain RRF beside
them) by 5-fold cross-validation over queries, stratified by set and, in the project set,
by kind: in each fold a family's setting is the one of its grid with the best mean over
sets of training nDCG@10 (so the 114 project queries weigh as much as SciFact's 809).
It prints each family's held-out nDCG@10 per set (per query, averaged over --seeds
shuffles) with its interval and its paired difference from the set's best, and names the
simplest family (fewest tuned constants) not significantly worse than the best on either
public set: the one to ship.

Where a set ran on both paths it prints the share of queries whose top 10 the two return
identically (and the same as a set; and how often their lexical and vector lists' first
10 agree, to say where a difference comes from).

Exit status 1 unless, on every set and path, shipped nDCG@10 ≥ rrf's, on the project set
hybrid beats both single methods, and server and bridge return the same top 10 for ≥ 95 %
of every set's queries.

--baseline PICKLE compares with a capture written earlier (--captures) by another embedder
or derivation: per set and path, this run's shipped and vector nDCG@10 and recall@5 minus
the baseline's, with paired intervals over the same queries.

    /work/main/.venv/bin/python bench/search_eval.py [--sets project,scifact,locomo]
        [--data DIR] [--server] [--json] [--cv [--seeds N]] [--captures PICKLE]
        [--baseline PICKLE]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import itertools
import json
import math
import os
import pickle
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
import retrieval_dev  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from claims import embeddings, search, snapshot_render  # noqa: E402
from claims.models import Claim, text_hash  # noqa: E402
from fleet.models import Fleet  # noqa: E402
from mcp_bridge import testing  # noqa: E402
from mcp_bridge.contract import embed, ranking  # noqa: E402
from mcp_bridge.snapshot import Snapshot  # noqa: E402

DATA = ROOT / "bench" / "data"
K = 10
DEEP = 100  # recall@100 comes from a k=100 search
METHODS = ("lexical", "vector", "rrf", "shipped")
KINDS = ("keyword", "paraphrase", "identifier")
PLAIN_RRF_K = 60
AGREE = 0.95  # share of queries whose top 10 both paths must return identically
FOLDS = 5
# --cv grid: the fusion's free constants (mcp_bridge.contract.ranking)
GRID = {
    "RRF_K": (5, 10, 20, 60),
    "LEXICAL_WEIGHT": (1.0, 1.5, 2.0, 3.0, 4.0),
    "COVERAGE_POWER": (1.0, 2.0, 3.0),
}


# -- candidate lists ------------------------------------------------------------------------


@dataclass
class Lists:
    """What one search computed before fusing, ids as the set labels them."""

    lexical: list[str]
    coverage: dict[str, float]
    vector: list[str]
    anyterm: list[str]  # BM25 over any query term, for plain RRF
    tiebreak: dict[str, str] | None = None  # label → the id the real search breaks ties by


@dataclass
class Capture:
    """One query on one path: the lists at k=10 and at k=100, and the real results."""

    at10: Lists
    at100: Lists
    shipped10: list[str]
    shipped100: list[str]


def bridge_capture(snap: Snapshot, label: dict[str, str], query: str, qvec: Any,
                   subject: str | None) -> Capture:
    now = dt.datetime.now(dt.UTC)
    ids = _rowids(snap)
    terms = ranking.query_terms(query)
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms]

    def lists(k: int) -> Lists:
        lex, cov = snap._lexical(query, k, now, None, subject, None)
        vec = snap._vector(qvec, k, now, None, subject, None)
        anyterm = (snap._bm25(" OR ".join(quoted), ranking.depth(k), now, None, subject, None,
                              subject is not None) if terms else [])
        return Lists([label[ids[r]] for r in lex],
                     {label[ids[r]]: c for r, c in cov.items()},
                     [label[ids[r]] for r in vec], [label[ids[r]] for r in anyterm],
                     {v: k for k, v in label.items()})

    def real(k: int) -> list[str]:
        hits = snap.search(query, k=k, subject=subject, query_vector=qvec, now=now)
        return [label[h["id"]] for h in hits.results]

    return Capture(lists(K), lists(DEEP), real(K), real(DEEP))


_ROWIDS: dict[int, dict[int, str]] = {}


def _rowids(snap: Snapshot) -> dict[int, str]:
    """rowid → claim id of a snapshot, read once."""
    if id(snap) not in _ROWIDS:
        _ROWIDS[id(snap)] = dict(snap.db.execute("SELECT rowid, id FROM claims"))
    return _ROWIDS[id(snap)]


def server_capture(fleet: Fleet, label: dict[int, str], query: str, subject: str | None,
                   public: dict[str, str], qvec: Any = None) -> Capture:
    """`qvec`: the query vector the bridge was given. The public sets' query vectors are
    embedded in batches and cached (retrieval_dev), and a batch's int8 quantisation moves
    a vector a little (cosine ~0.99 to the query embedded alone, which the server does), so
    the server gets the bridge's vector: the sides are compared on the same input, as in
    the product, where both embed the query alone."""
    if qvec is not None:
        with _query_vector(qvec):
            return server_capture(fleet, label, query, subject, public)
    now = timezone.now()
    statuses = [Claim.Status.PROMOTED]
    everything = search.collection(fleet, statuses)
    narrow = search.narrowing(None, subject, None, False, now)
    qvec = search._query_vector(query)
    terms = ranking.query_terms(query)

    def lists(k: int) -> Lists:
        n = ranking.depth(k)
        stats = lambda: search.collection_stats(fleet, statuses)  # noqa: E731
        lex, cov = search._lexical(fleet, everything, narrow, query, k, n, stats)
        vec = search._vector(everything.filter(narrow), qvec, n) if qvec is not None else []
        anyterm = [pk for pk, _ in search._anyterm(fleet, everything, narrow, query, n,
                                                   stats)] if terms else []
        return Lists([label[pk] for pk in lex], {label[pk]: c for pk, c in cov.items()},
                     [label[pk] for pk in vec], [label[pk] for pk in anyterm], public)

    def real(k: int) -> list[str]:
        found = search.search_claims(fleet, query, k=k, subject=subject, now=now)
        return [label[c.pk] for c in found.claims]

    return Capture(lists(K), lists(DEEP), real(K), real(DEEP))


@contextmanager
def _query_vector(qvec: Any) -> Iterator[None]:
    saved = search._query_vector
    search._query_vector = lambda query: qvec  # type: ignore[assignment]
    try:
        yield
    finally:
        search._query_vector = saved  # type: ignore[assignment]


# -- fusion, offline -------------------------------------------------------------------------

UNIFORM = ranking.Factors(confidence=1.0, age_days=0.0, staleness=0.0)


def fused(lists: Lists, method: str) -> list[str]:
    """The ranking `method` makes of the captured lists (every claim has the same factors,
    so the ranking is the fusion's alone)."""
    if method == "rrf":
        score: dict[str, float] = {}
        for ranked in (lists.anyterm, lists.vector):
            for i, cid in enumerate(ranked, 1):
                score[cid] = score.get(cid, 0.0) + 1.0 / (PLAIN_RRF_K + i)
        return [c for c, _ in sorted(score.items(), key=lambda p: (-p[1], p[0]))]
    lexical = lists.lexical if method in ("lexical", "shipped") else []
    vector = lists.vector if method in ("vector", "shipped") else []
    # fuse under the ids the real search fuses under, so equal scores break the same way
    to = lists.tiebreak or {}
    back = {v: k for k, v in to.items()}
    lexical, vector = [to.get(c, c) for c in lexical], [to.get(c, c) for c in vector]
    coverage = {to.get(c, c): v for c, v in lists.coverage.items()}
    factors = dict.fromkeys([*lexical, *vector], UNIFORM)
    return [back.get(c, c) for c, _ in ranking.fuse(lexical, vector, factors, coverage=coverage)]


# -- metrics --------------------------------------------------------------------------------


def metrics(top10: list[str], top100: list[str], relevant: dict[str, int]) -> dict[str, float]:
    dcg = sum((2 ** relevant[c] - 1) / math.log2(i + 2)
              for i, c in enumerate(top10[:K]) if c in relevant)
    ideal = sorted(relevant.values(), reverse=True)[:K]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    first = next((i for i, c in enumerate(top10[:K]) if c in relevant), None)
    return {
        "ndcg@10": dcg / idcg,
        "recall@5": len([c for c in top10[:5] if c in relevant]) / len(relevant),
        "recall@100": len([c for c in top100[:DEEP] if c in relevant]) / len(relevant),
        "mrr@10": 0.0 if first is None else 1.0 / (first + 1),
    }


def score(capture: Capture, relevant: dict[str, int], method: str) -> dict[str, float]:
    return metrics(fused(capture.at10, method)[:K], fused(capture.at100, method)[:DEEP],
                   relevant)


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {m: sum(r[m] for r in rows) / len(rows) for m in rows[0]}


# -- sets -----------------------------------------------------------------------------------


@dataclass
class Run:
    """One set searched on one path: per query its capture and relevance."""

    set: str
    path: str
    queries: list[dict[str, Any]]
    captures: list[Capture]
    seconds: float


def project_queries() -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    with open(DATA / "claims.tsv", newline="") as f:
        claims = list(csv.DictReader(f, delimiter="\t"))
    with open(DATA / "queries.tsv", newline="") as f:
        queries = []
        for row in csv.DictReader(f, delimiter="\t"):
            grades = dict(pair.split(":") for pair in row["relevant"].split(","))
            queries.append({"id": row["qid"], "query": row["query"], "kind": row["kind"],
                            "group": "", "relevant": {k: int(v) for k, v in grades.items()}})
    return claims, queries


@contextmanager
def throwaway_fleet(docs: list[dict[str, str]], vectors: Any | None) -> Iterator[
        tuple[Fleet, dict[int, str]]]:
    """A fleet holding `docs` as promoted claims (subject = doc group), embedded with the
    real embedder or given `vectors`; deleted afterwards."""
    fleet = Fleet.objects.create(slug=f"bench-eval-{uuid.uuid4().hex[:8]}", name="search eval",
                                 memory_mode="live")
    now = timezone.now()
    try:
        rows = Claim.objects.bulk_create((
            Claim(fleet=fleet, number=i + 1, text=d["text"], type=d.get("type") or "fact",
                  subject=d.get("subject") or d.get("group") or "general", scope="fleet",
                  status="promoted", promoted_at=now, confidence=0.8, independent_sessions=1,
                  text_hash=text_hash(d["text"]),
                  **({} if vectors is None else {"embedding": vectors[i],
                                                  "embedding_model": embed.NAME}))
            for i, d in enumerate(docs)), batch_size=500)
        if vectors is None:
            embeddings.embed_claims(Claim.objects.filter(fleet=fleet))
        yield fleet, {row.pk: d["id"] for row, d in zip(rows, docs, strict=True)}
    finally:
        fleet.delete()


def run_project(paths: set[str]) -> list[Run]:
    claims, queries = project_queries()
    docs = [{"id": c["id"], "text": c["text"], "type": c["type"], "subject": c["subject"]}
            for c in claims]
    out = []
    with throwaway_fleet(docs, None) as (fleet, label), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.sqlite"
        snapshot_render.write_snapshot(fleet, path, generated_at=timezone.now())
        snap = Snapshot(path, fleet=fleet.slug)
        public = {c.public_id: label[c.pk] for c in Claim.objects.filter(fleet=fleet)}
        if "bridge" in paths:
            started = time.monotonic()
            caps = [bridge_capture(snap, public, q["query"], embed.embed_query(q["query"]), None)
                    for q in queries]
            out.append(Run("project", "bridge", queries, caps, time.monotonic() - started))
        if "server" in paths:
            started = time.monotonic()
            tiebreak = {label[c.pk]: c.public_id for c in Claim.objects.filter(fleet=fleet)}
            caps = [server_capture(fleet, label, q["query"], None, tiebreak) for q in queries]
            out.append(Run("project", "server", queries, caps, time.monotonic() - started))
        snap.close()
    return out


def run_public(base: Path, name: str, paths: set[str]) -> list[Run]:
    ds = retrieval_dev.load(base, name)
    docs = [{**d, "subject": d["group"] or "general"} for d in ds.docs]
    matrix = retrieval_dev.vectors(embed, [d["text"] for d in ds.docs], f"{name}-docs")
    qvecs = retrieval_dev.vectors(embed, [q["query"] for q in ds.queries], f"{name}-queries")
    out = []
    if "bridge" in paths:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "snapshot.sqlite"
            # the ids the server gives the same claims (cc-NN, numbered in the same order),
            # so both sides break equal fused scores alike, as they do in the product
            rows = [testing.claim(f"cc-{i + 1:02d}", d["text"], subject=d["subject"])
                    for i, d in enumerate(docs)]
            testing.write_snapshot(path, "eval", rows, vectors=matrix)
            snap = Snapshot(path, fleet="eval")
            label = {f"cc-{i + 1:02d}": d["id"] for i, d in enumerate(docs)}
            started = time.monotonic()
            caps = [bridge_capture(snap, label, q["query"], qvecs[i],
                                   q["group"] if ds.grouped else None)
                    for i, q in enumerate(ds.queries)]
            out.append(Run(name, "bridge", ds.queries, caps, time.monotonic() - started))
            snap.close()
    if "server" in paths:
        with throwaway_fleet(docs, matrix) as (fleet, label):
            started = time.monotonic()
            tiebreak = {label[c.pk]: c.public_id for c in Claim.objects.filter(fleet=fleet)}
            caps = [server_capture(fleet, label, q["query"], q["group"] if ds.grouped else None,
                                   tiebreak, qvecs[i]) for i, q in enumerate(ds.queries)]
            out.append(Run(name, "server", ds.queries, caps, time.monotonic() - started))
    return out


# -- reporting ------------------------------------------------------------------------------


def groups(run: Run) -> dict[str, list[int]]:
    out = {"all": list(range(len(run.queries)))}
    if run.set == "project":
        for kind in KINDS:
            out[kind] = [i for i, q in enumerate(run.queries) if q["kind"] == kind]
    return out


def per_query(run: Run, method: str) -> list[dict[str, float]]:
    return [score(c, q["relevant"], method) for c, q in zip(run.captures, run.queries,
                                                             strict=True)]


def agreement(run: Run) -> int:
    """Queries whose real search results differ from the offline fusion of its lists."""
    return sum(1 for c in run.captures
               if fused(c.at10, "shipped")[:K] != c.shipped10
               or fused(c.at100, "shipped")[:DEEP] != c.shipped100)


def sides_agree(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per set searched on both paths: the share of queries whose top 10 the server and
    the bridge return identically (in order), as the same set, and whose lexical lists
    (the first 10, in order) are identical."""
    by = {(r.set, r.path): r for r in runs}
    out = {}
    for s in dict.fromkeys(r.set for r in runs):
        if (s, "server") not in by or (s, "bridge") not in by:
            continue
        pairs = list(zip(by[s, "server"].captures, by[s, "bridge"].captures, strict=True))
        n = len(pairs)
        out[s] = {
            "top10": sum(a.shipped10 == b.shipped10 for a, b in pairs) / n,
            "top10_set": sum(set(a.shipped10) == set(b.shipped10) for a, b in pairs) / n,
            "lexical10": sum(a.at10.lexical[:K] == b.at10.lexical[:K] for a, b in pairs) / n,
            "vector10": sum(a.at10.vector[:K] == b.at10.vector[:K] for a, b in pairs) / n,
            # the server's lists with the bridge's vector list in place of its own, fused
            # offline: what agreement the lexical side alone leaves
            "top10_same_vectors": sum(
                fused(Lists(a.at10.lexical, a.at10.coverage, b.at10.vector, [], a.at10.tiebreak),
                      "shipped")[:K] == b.shipped10 for a, b in pairs) / n,
        }
    return out


SHOWN = ("ndcg@10", "recall@5", "recall@100")  # the figures printed with intervals


def intervals(rows: dict[str, list[dict[str, float]]], idx: list[int]) -> dict[str, Any]:
    """Per method and metric the 95 % bootstrap interval of the mean, and shipped − rrf
    with its paired interval: every method resampled on the same queries (one seed), so
    the intervals are paired across methods, as the difference's is."""
    out: dict[str, Any] = {}
    for m in METHODS:
        out[m] = {k: retrieval_dev.paired_bootstrap([0.0] * len(idx),
                                                    [rows[m][i][k] for i in idx])[1:]
                  for k in SHOWN}
    out["shipped-rrf"] = {k: retrieval_dev.paired_bootstrap(
        [rows["rrf"][i][k] for i in idx], [rows["shipped"][i][k] for i in idx]) for k in SHOWN}
    return out


def report(runs: list[Run]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for run in runs:
        rows = {m: per_query(run, m) for m in METHODS}
        for group, idx in groups(run).items():
            key = f"{run.set}/{group}" if group != "all" else run.set
            out.setdefault(key, {})[run.path] = {
                "queries": len(idx),
                **{m: mean([rows[m][i] for i in idx]) for m in METHODS},
                "ci": intervals(rows, idx),
            }
        out[run.set][run.path]["mismatches"] = agreement(run)
        out[run.set][run.path]["seconds"] = round(run.seconds, 1)
    for s, shares in sides_agree(runs).items():
        out[s]["sides"] = shares
    return out


def table(results: dict[str, Any]) -> str:
    """Each figure with its 95 % bootstrap interval, then shipped − rrf with its paired one."""
    lines = ["| set | path | method | nDCG@10 | recall@5 | recall@100 | MRR@10 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, by_path in results.items():
        for path, r in by_path.items():
            if path == "sides":
                continue
            for m in METHODS:
                x, ci = r[m], r["ci"][m]
                cells = " | ".join(f"{x[k]:.4f} [{ci[k][0]:.3f}, {ci[k][1]:.3f}]" for k in SHOWN)
                lines.append(f"| {key} ({r['queries']}) | {path} | {m} | {cells} "
                             f"| {x['mrr@10']:.4f} |")
            d = r["ci"]["shipped-rrf"]
            cells = " | ".join(f"{d[k][0]:+.4f} [{d[k][1]:+.3f}, {d[k][2]:+.3f}]" for k in SHOWN)
            lines.append(f"| {key} ({r['queries']}) | {path} | shipped − rrf | {cells} | |")
    return "\n".join(lines)


def versus_baseline(runs: list[Run], baseline: list[Run]) -> str:
    """This run's shipped and vector nDCG@10 / recall@5 minus a baseline capture's (another
    embedder or derivation, searched earlier with --captures), per set and path, each with
    its paired 95 % interval over the same queries: an interval that holds 0 is no
    evidence of a difference."""
    theirs = {(r.set, r.path): r for r in baseline}
    lines = ["| set | path | method | nDCG@10 this − baseline | recall@5 this − baseline |",
             "| --- | --- | --- | --- | --- |"]
    for run in runs:
        base = theirs.get((run.set, run.path))
        if base is None or [q["query"] for q in base.queries] != \
                [q["query"] for q in run.queries]:
            lines.append(f"| {run.set} | {run.path} | — | not in the baseline "
                         "(or other queries) | |")
            continue
        for method in ("shipped", "vector"):
            ours, before = per_query(run, method), per_query(base, method)
            cells = []
            for metric in ("ndcg@10", "recall@5"):
                d, lo, hi = retrieval_dev.paired_bootstrap([r[metric] for r in before],
                                                           [r[metric] for r in ours])
                cells.append(f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]")
            lines.append(f"| {run.set} ({len(run.queries)}) | {run.path} | {method} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(results: dict[str, Any], sets: list[str]) -> list[str]:
    """What fails the done-when: shipped < rrf on a set, or project hybrid not ahead."""
    fails = []
    for s in sets:
        sides = results[s].get("sides")
        if sides and sides["top10"] < AGREE:
            fails.append(f"{s}: server and bridge agree on the top 10 for "
                         f"{sides['top10']:.1%} of queries (< {AGREE:.0%})")
        for path, r in results[s].items():
            if path == "sides":
                continue
            if r["shipped"]["ndcg@10"] < r["rrf"]["ndcg@10"]:
                fails.append(f"{s}/{path}: shipped {r['shipped']['ndcg@10']:.4f} < rrf "
                             f"{r['rrf']['ndcg@10']:.4f}")
            if r["mismatches"]:
                fails.append(f"{s}/{path}: {r['mismatches']} queries where the real search "
                             "differs from the offline fusion of its lists")
            if s == "project":
                best = max(r["lexical"]["ndcg@10"], r["vector"]["ndcg@10"])
                if r["shipped"]["ndcg@10"] <= best:
                    fails.append(f"project/{path}: shipped does not beat both single methods")
    return fails


# -- cross-validation -------------------------------------------------------------------------


@contextmanager
def constants(values: dict[str, float]) -> Iterator[None]:
    saved = {k: getattr(ranking, k) for k in values}
    try:
        for k, v in values.items():
            setattr(ranking, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(ranking, k, v)


def grid() -> list[dict[str, float]]:
    keys = list(GRID)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*GRID.values())]


def ndcg_table(runs: list[Run], params: list[dict[str, float]]) -> tuple[Any, Any]:
    """nDCG@10 per (params, run, query) for the shipped fusion, and per (run, query) for rrf."""
    shipped = []
    for p in params:
        with constants(p):
            shipped.append([[metrics(fused(c.at10, "shipped")[:K], [], q["relevant"])["ndcg@10"]
                             for c, q in zip(r.captures, r.queries, strict=True)] for r in runs])
    rrf = [[metrics(fused(c.at10, "rrf")[:K], [], q["relevant"])["ndcg@10"]
            for c, q in zip(r.captures, r.queries, strict=True)] for r in runs]
    return shipped, rrf


# The candidate fusions, simplest first: each a subset of GRID, with the constants it tunes
# (a family tunes none when GRID is cut to one value for every constant). "rrf" is plain
# RRF k=60 of BM25 over any term and the vector list, outside the grid.
FAMILIES: dict[str, dict[str, tuple[float, ...]]] = {
    "rrf60 of the shipped lists": {"RRF_K": (60,), "LEXICAL_WEIGHT": (1.0,),
                                   "COVERAGE_POWER": (1.0,)},
    "lexical weight only (k 60)": {"RRF_K": (60,), "LEXICAL_WEIGHT": GRID["LEXICAL_WEIGHT"],
                                   "COVERAGE_POWER": (1.0,)},
    "lexical weight and k": {"RRF_K": GRID["RRF_K"], "LEXICAL_WEIGHT": GRID["LEXICAL_WEIGHT"],
                             "COVERAGE_POWER": (1.0,)},
    "weighted rrf (3 constants)": GRID,
}


def tuned(family: str) -> int:
    """How many constants a family tunes: "simplest" is fewest (plain RRF tunes none)."""
    return 0 if family == "rrf" else sum(len(v) > 1 for v in FAMILIES[family].values())


def members(family: str, params: list[dict[str, float]]) -> list[int]:
    allowed = FAMILIES[family]
    return [i for i, p in enumerate(params) if all(p[k] in allowed[k] for k in allowed)]


def fold_assignments(runs: list[Run], seed: int) -> list[Any]:
    """Per run each query's fold, stratified by kind (the project's) or set."""
    rng = random.Random(seed)
    out = []
    for r in runs:
        strata: dict[str, list[int]] = {}
        for i, q in enumerate(r.queries):
            strata.setdefault(str(q["kind"]), []).append(i)
        assign = np.empty(len(r.queries), dtype=int)
        offset = 0
        for _, idx in sorted(strata.items()):
            rng.shuffle(idx)
            for j, i in enumerate(idx):
                assign[i] = (offset + j) % FOLDS
            offset += len(idx)
        out.append(assign)
    return out


def held_out(arr: list[Any], rows: list[int], seeds: int, runs: list[Run],
             chosen: Counter[str], params: list[dict[str, float]]) -> list[Any]:
    """Per run each query's held-out nDCG@10, averaged over `seeds` shuffles: in each fold
    the family's setting with the best mean over sets of training nDCG@10 ranks it."""
    held = [np.zeros(len(r.queries)) for r in runs]
    for seed in range(seeds):
        folds_of = fold_assignments(runs, seed)
        for fold in range(FOLDS):
            fit = sum(a[rows][:, f != fold].mean(axis=1) for a, f in zip(arr, folds_of,
                                                                          strict=True))
            best = rows[int(np.argmax(np.round(fit, 9)))]
            chosen[json.dumps(params[best])] += 1
            for ri, (a, f) in enumerate(zip(arr, folds_of, strict=True)):
                held[ri][f == fold] += a[best, f == fold] / seeds
    return held


def cross_validate(runs: list[Run], seeds: int) -> str:
    """Each candidate fusion's held-out nDCG@10 per set with its 95 % bootstrap interval,
    each one's paired difference from the best on that set, and the simplest candidate
    not significantly worse than the best on any public set (the one to ship)."""
    params = grid()
    started = time.monotonic()
    shipped, rrf = ndcg_table(runs, params)
    arr = [np.array([shipped[p][r] for p in range(len(params))]) for r in range(len(runs))]
    scores: dict[str, list[Any]] = {"rrf": [np.array(x) for x in rrf]}
    picks: dict[str, Counter[str]] = {}
    for family in FAMILIES:
        picks[family] = Counter()
        scores[family] = held_out(arr, members(family, params), seeds, runs, picks[family],
                                  params)
    lines = [f"{FOLDS}-fold cross-validation of the candidate fusions ({seeds} shuffles, "
             f"{time.monotonic() - started:.0f}s): held-out nDCG@10 per query averaged over "
             "shuffles; [95 % bootstrap interval]; paired difference from the set's best"]
    public = [ri for ri, r in enumerate(runs) if r.set != "project"]
    worse: dict[str, bool] = dict.fromkeys(scores, False)
    for ri, r in enumerate(runs):
        best = max(scores, key=lambda f: float(scores[f][ri].mean()))
        lines.append(f"  {r.set}/{r.path} (best: {best})")
        for family, held in scores.items():
            _, lo, hi = retrieval_dev.paired_bootstrap([0.0] * len(held[ri]), held[ri])
            d, dlo, dhi = retrieval_dev.paired_bootstrap(scores[best][ri], held[ri])
            worse[family] |= ri in public and dhi < 0
            lines.append(f"    {family} ({tuned(family)} tuned): {held[ri].mean():.4f} "
                         f"[{lo:.3f}, {hi:.3f}]; minus best {d:+.4f} [{dlo:+.3f}, {dhi:+.3f}]")
    for family, c in picks.items():
        lines.append(f"  {family} chosen: " + "; ".join(f"{k} ({n})" for k, n in c.most_common(4)))
    ok = [f for f in scores if not worse[f]]
    simplest = min(ok, key=lambda f: (tuned(f), -sum(float(scores[f][ri].mean())
                                                       for ri in public)))
    lines.append(f"  not significantly worse than the best on any public set: {', '.join(ok)}; "
                 f"the simplest (fewest tuned constants): {simplest}")
    if simplest != "rrf":
        rows = members(simplest, params)
        whole = rows[int(np.argmax(sum(arr[ri][rows].mean(axis=1) for ri in range(len(runs)))))]
        lines.append(f"  its setting on all queries: {params[whole]}")
    current = {k: getattr(ranking, k) for k in GRID}
    if current in params:
        lines.append(f"  shipped {current} in sample: " + ", ".join(
            f"{r.set}/{r.path} {arr[i][params.index(current)].mean():.4f}"
            for i, r in enumerate(runs)))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="project,scifact,locomo",
                        help="comma-separated: project, scifact, locomo")
    parser.add_argument("--data", help="retrieval-dev folder (default ../shared/retrieval-dev "
                        "beside the repository, or $CTXLAKE_RETRIEVAL_DEV)")
    parser.add_argument("--server", action="store_true",
                        help="also search the public sets on the server (Postgres) path")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--cv", action="store_true", help="cross-validate the fusion grid")
    parser.add_argument("--seeds", type=int, default=10, help="CV shuffles (default 10)")
    parser.add_argument("--captures", help="pickle of the searched lists: read it when it "
                        "exists (no searching; the fusion is re-run on it), else write it "
                        "(keep it outside the repository: it holds the public sets' ids)")
    parser.add_argument("--baseline", help="a --captures pickle of another embedder or "
                        "derivation: print this run's shipped and vector figures minus its, "
                        "paired")
    args = parser.parse_args()
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    base = retrieval_dev.data_dir(args.data)
    missing = [s for s in sets if s != "project" and s not in retrieval_dev.available(base)]
    if missing:
        print(f"no {', '.join(missing)} under {base}: pass --data or set CTXLAKE_RETRIEVAL_DEV",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    runs: list[Run] = []
    if args.captures and Path(args.captures).is_file():
        with open(args.captures, "rb") as f:
            runs = [r for r in pickle.load(f) if r.set in sets]
        print(f"lists read from {args.captures} (searched earlier; fusion re-run now)")
    else:
        if "project" in sets or args.server:  # the server path needs the schema, fresh home too
            call_command("migrate", verbosity=0)
        for s in sets:
            paths = {"bridge", "server"} if s == "project" or args.server else {"bridge"}
            runs += run_project(paths) if s == "project" else run_public(base, s, paths)
        if args.captures:
            with open(args.captures, "wb") as f:
                pickle.dump(runs, f)
    results = report(runs)
    fails = verdict(results, sets)
    load = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"sets {', '.join(sets)}; ranking RRF_K {ranking.RRF_K:g}, LEXICAL_WEIGHT "
              f"{ranking.LEXICAL_WEIGHT:g}, COVERAGE_POWER {ranking.COVERAGE_POWER:g}; embedder "
              f"{embed.NAME}; {time.monotonic() - started:.0f}s; load average "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
        print(table(results) + "\n")
        for s, sides in sides_agree(runs).items():
            print(f"{s}: server and bridge return the same top 10 for {sides['top10']:.1%} of "
                  f"queries ({sides['top10_set']:.1%} the same set); lexical lists' first 10 "
                  f"identical {sides['lexical10']:.1%}, vector lists' {sides['vector10']:.1%}; "
                  f"with the bridge's vector list the server's top 10 would agree for "
                  f"{sides['top10_same_vectors']:.1%}")
        for r in runs:
            print(f"{r.set}/{r.path}: {len(r.queries)} queries searched in {r.seconds:.1f}s "
                  f"(lists at k=10 and k=100 plus the real search at both); real search vs "
                  f"offline fusion mismatches: {results[r.set][r.path]['mismatches']}")
    if args.cv and not args.json:
        print("\n" + cross_validate(runs, args.seeds))
    if args.baseline and not args.json:
        with open(args.baseline, "rb") as f:
            print(f"\nagainst the baseline {args.baseline}:\n"
                  + versus_baseline(runs, pickle.load(f)))
    print("done-when (shipped ≥ rrf on every set and path; project hybrid beats both; "
          "the sides agree on the top 10 for ≥ 95 % of queries): "
          + ("met" if not fails else "NOT met: " + "; ".join(fails)), file=sys.stderr)
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())

"""Public retrieval sets read at run time from ../shared/retrieval-dev (never copied here).

SciFact (train split: 809 scientific claims → the abstracts that support or refute them,
5,183 abstracts) and five LoCoMo conversations (760 questions → the dialogue turns that
answer them; one conversation = one memory store, its id in `metadata.group`), both in
BEIR layout. Their licences are non-commercial (CC BY-NC), so this module only reads
them from outside the repository; the project ships none of it.

Document vectors take minutes on two shared cores, so they are cached outside the
repository (CTXLAKE_EVAL_CACHE, default ~/.cache/ctxlake-eval), keyed by what computes the
vectors (the embedder's `KEY` when it has one, embed.KEY: the weights, their derivation and
the session's graph rewrites, each of which moves them; else its `NAME`) and a digest of
the texts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "retrieval-dev"
SETS = ("scifact", "locomo")
CACHE = Path(os.environ.get("CTXLAKE_EVAL_CACHE", Path.home() / ".cache" / "ctxlake-eval"))


@dataclass
class Dataset:
    name: str
    docs: list[dict[str, str]]  # {"id", "text", "group"}
    queries: list[dict[str, Any]]  # {"id", "query", "group", "relevant": {doc id: grade}}
    grouped: bool = False  # LoCoMo: search only the query's group (its conversation)
    meta: dict[str, Any] = field(default_factory=dict)


def data_dir(explicit: str | None = None) -> Path:
    """--data, else $CTXLAKE_RETRIEVAL_DEV, else ../shared/retrieval-dev beside the repo."""
    return Path(explicit or os.environ.get("CTXLAKE_RETRIEVAL_DEV") or DEFAULT_DATA)


def available(base: Path) -> list[str]:
    return [s for s in SETS if (base / s / "corpus.jsonl").is_file()]


def load(base: Path, name: str, split: str = "dev") -> Dataset:
    """Docs (claim text = title + " " + text, as the set's README says), queries with at
    least one relevant doc in the split's qrels, grades as given."""
    folder = base / name
    docs = []
    with open(folder / "corpus.jsonl") as f:
        for line in f:
            d = json.loads(line)
            text = f"{d.get('title') or ''} {d.get('text') or ''}".strip()
            docs.append({"id": str(d["_id"]), "text": text,
                         "group": str((d.get("metadata") or {}).get("group") or "")})
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / f"{split}.tsv") as f:
        next(f)
        for line in f:
            qid, did, grade = line.rstrip("\n").split("\t")
            if int(grade) > 0:
                qrels.setdefault(qid, {})[did] = int(grade)
    queries = []
    with open(folder / "queries.jsonl") as f:
        for line in f:
            q = json.loads(line)
            qid = str(q["_id"])
            if qid in qrels:
                queries.append({"id": qid, "query": q["text"], "kind": name,
                                "group": str((q.get("metadata") or {}).get("group") or ""),
                                "relevant": qrels[qid]})
    grouped = any(q["group"] for q in queries)
    return Dataset(name, docs, queries, grouped=grouped)


def _digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def vectors(embedder: Any, texts: list[str], label: str) -> Any:
    """embedder.embed(texts), cached by model and text digest; progress on stderr."""
    import numpy as np

    key = getattr(embedder, "KEY", embedder.NAME)
    path = CACHE / f"{label}-{key}-{_digest(texts)}.npy"
    if path.is_file():
        return np.load(path)
    CACHE.mkdir(parents=True, exist_ok=True)
    out = []
    step = 256
    for i in range(0, len(texts), step):
        out.append(embedder.embed(texts[i:i + step]))
        print(f"  embedding {label}: {min(i + step, len(texts))}/{len(texts)}",
              file=sys.stderr, flush=True)
    matrix = np.concatenate(out) if out else np.zeros((0, embedder.DIMS), dtype=np.float32)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, matrix)
    os.replace(tmp, path)
    return matrix


def metrics(ranked: list[str], relevant: dict[str, int]) -> dict[str, float]:
    """nDCG@10 (gain 2^grade − 1, as BEIR and eval.py), recall@5 and recall@100 of one
    ranking; the formula search_eval.py and embed_bench.py use, here without Django."""
    import math

    dcg = sum((2 ** relevant[c] - 1) / math.log2(i + 2)
              for i, c in enumerate(ranked[:10]) if c in relevant)
    ideal = sorted(relevant.values(), reverse=True)[:10]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return {"ndcg@10": dcg / idcg,
            "recall@5": len([c for c in ranked[:5] if c in relevant]) / len(relevant),
            "recall@100": len([c for c in ranked[:100] if c in relevant]) / len(relevant)}


def paired_bootstrap(a: Any, b: Any, *, resamples: int = 2000, seed: int = 0) -> tuple[
        float, float, float]:
    """Mean of b − a over the same queries and its 95 % percentile interval, resampling
    queries with replacement (paired: both systems see the same resampled queries)."""
    import numpy as np

    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)

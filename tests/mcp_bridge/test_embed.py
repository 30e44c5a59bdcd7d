from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mcp_bridge.contract import embed, embed_words


def test_it_ships_the_bert_uncased_vocabulary() -> None:
    data = embed.VOCAB_PATH.read_bytes()
    assert hashlib.sha256(data).hexdigest() == embed.VOCAB_SHA256
    assert len(data.decode().splitlines()) == 30522
    assert (embed.VOCAB_PATH.parent / "NOTICE").read_text().count("Apache")


def test_it_tokenizes_like_bert() -> None:
    ids = embed.tokenize("Hello world")
    assert ids[0] == 101 and ids[-1] == 102 and ids == [101, 7592, 2088, 102]


def test_it_embeds_normalised_384_dim_float32() -> None:
    vectors = embed.embed(["one", "two sentences here"])
    assert vectors.shape == (2, embed.DIMS) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embed.embed([]).shape == (0, embed.DIMS)


def test_it_places_paraphrases_closer_than_unrelated_sentences() -> None:
    a, b, c = embed.embed(["The build fails unless RUSTFLAGS is set.",
                           "Compilation breaks when the RUSTFLAGS variable is missing.",
                           "We ordered pizza for the team lunch."])
    assert a @ b > 0.6 and a @ b > a @ c + 0.3


def test_it_caches_repeated_query_embeddings() -> None:
    first = embed.embed_query("a repeated query")
    assert embed.embed_query("a repeated query") is first


def test_length_sorted_batches_keep_the_callers_order() -> None:
    """Texts are batched by token length and padded per batch; the vectors come back in
    the order given. The model quantises activations per call (dynamic int8), so a
    batched text's vector is close to, not equal to, its vector alone; the same batch
    gives the same vectors every time."""
    texts = ["short", "a much longer text " * 20, "mid length text here", "x"] * 12
    together = embed.embed(texts)
    alone = np.stack([embed.embed([t])[0] for t in texts[:4]])
    assert together.shape == (len(texts), embed.DIMS)
    for block in (together[:4], together[4:8], together[-4:]):
        similarity = block @ alone.T  # row i is nearest its own text, and nearly equal
        assert list(similarity.argmax(axis=1)) == [0, 1, 2, 3]
        assert similarity.diagonal().min() > 0.97  # a one-letter text moves most (0.978)
    assert np.array_equal(embed.embed(texts), together)


def test_batches_are_bounded_in_texts_and_padded_tokens() -> None:
    calls: list[tuple[int, int]] = []
    model = embed.model()
    run = model._run

    def spy(ids: list[list[int]], width: int) -> np.ndarray:
        calls.append((len(ids), width))
        return run(ids, width)

    model._run = spy  # type: ignore[method-assign]
    try:
        embed.embed(["word " * n for n in range(1, 200)])
    finally:
        del model._run
    assert all(n <= embed.BATCH and n * width <= embed.BATCH_TOKENS for n, width in calls)
    assert [w for _, w in calls] == sorted(w for _, w in calls)  # ascending lengths


def test_it_runs_int8_compute_derived_from_the_checked_weights() -> None:
    """The model file is derived from the sha-pinned source: MatMuls quantised (int8
    activations at run time; each layer's Q/K/V projections inside its fused attention),
    the FFN output projections 8-bit weight MatMulNBits (their input quantised per block),
    the position table kept int8 and dequantised after the lookup, and the word table
    int8 in a file of its own, whose rows the graph takes as its input (embed_words)."""
    import onnx

    path = embed.model_path()
    assert path == embed.derived_path(embed.VARIANT) and embed.VARIANT in path.name
    graph = onnx.load(str(path)).graph
    ops = [n.op_type for n in graph.node]
    inits = {i.name: i for i in graph.initializer}
    assert ops.count("MatMulInteger") == 12 and ops.count("QAttention") == 6
    assert ops.count("DynamicQuantizeLinear") >= 1 and ops.count("Gelu") == 6
    assert "Softmax" not in ops and "Erf" not in ops
    assert "MatMul" not in ops
    down = [inits[n.input[1]].dims for n in graph.node if n.op_type == "MatMulNBits"]
    assert len(down) == 6 and all(list(d) == [384, 1536 // 128, 128] for d in down)
    tables = [inits[n.input[0]] for n in graph.node
              if n.op_type == "Gather" and n.input[0] in inits]
    assert any(list(t.dims) == [512, 384] and t.data_type == onnx.TensorProto.INT8
               for t in tables)
    assert not any(t.dims[0] == 30522 for t in tables)
    assert [i.name for i in graph.input] == [embed_words.INPUT, "attention_mask",
                                             "token_type_ids"]
    words = embed_words.path_beside(path)
    assert words.stat().st_size == 30522 * (384 + 4)  # a scale and a row per token


def test_its_vectors_stay_close_to_the_float_compute_model() -> None:
    """Quantising activations moves vectors a little (docs/search.md: ≤ 0.004 nDCG@10 on
    the public sets); a broken derivation would move them far."""
    texts = ["The build fails unless RUSTFLAGS is set.", "who holds the lease on api/",
             "fleet.leases.contention_among compares every pair of live leases",
             "We ordered pizza for the team lunch."]
    reference = embed.OnnxEncoder(embed.source_path()).encode(texts)
    ours = np.stack([embed.embed([t])[0] for t in texts])
    assert (ours * reference).sum(axis=1).min() > 0.98


def test_its_session_keeps_each_residual_sum_and_layer_norm_apart(tmp_path: Path) -> None:
    """onnxruntime would fuse each layer's residual Add + LayerNormalization into one
    SkipLayerNormalization, whose CPU kernel is the slower (docs/search.md); the embedder's
    session leaves them apart, and its vectors stay those of the same arithmetic."""
    import onnx

    def ops(disabled: tuple[str, ...], name: str) -> list[str]:
        embed.session(embed.model_path(), 1, disabled, optimized_to=tmp_path / name)
        graph = onnx.load(str(tmp_path / name), load_external_data=False).graph
        return [n.op_type for n in graph.node]

    ours, default = ops(embed.DISABLED_OPTIMIZERS, "ours.onnx"), ops((), "default.onnx")
    assert "SkipLayerNormalization" not in ours and ours.count("LayerNormalization") == 13
    assert default.count("SkipLayerNormalization") == 12  # what it saves: 12 per query
    assert "SkipLayerNormFusion" in embed.KEY  # caches of vectors tell the two apart
    texts = ["The build fails unless RUSTFLAGS is set.", "who holds the lease on api/",
             "We ordered pizza for the team lunch."]
    fused = embed.OnnxEncoder(embed.model_path(), disabled_optimizers=()).encode(texts)
    assert (embed.model().encode(texts) * fused).sum(axis=1).min() > 0.99


def test_it_refuses_source_weights_with_another_digest(tmp_path: Path) -> None:
    tampered = tmp_path / "model.onnx"
    tampered.write_bytes(b"not the model")
    with pytest.raises(RuntimeError, match="sha256"):
        embed._check_sha256(tampered, hashlib.sha256(b"the model").hexdigest())


def test_bridges_deriving_at_once_write_one_file() -> None:
    """Several processes may need the model at once: a file lock makes one derive it and
    the others use it; no temporary files are left behind. The files of variants earlier
    versions derived go; a bench candidate's and another model's stay."""
    cache = Path(tempfile.mkdtemp(prefix="ctxlake-embed-"))
    retired = [f"minilm-l6-{v}-0123456789ab-ort1.{n}.0.onnx{suffix}"
               for n, v in enumerate(embed.RETIRED_VARIANTS, 20) for suffix in ("", ".data")]
    retired.append(f"minilm-l6-{embed.RETIRED_VARIANTS[-1]}-8199be6f699a-ort1.32.0.onnx.words")
    kept = [f"minilm-l6-{embed.RETIRED_VARIANTS[0]}-candidate-8199be6f699a-ort1.32.0.onnx",
            f"minilm-l6-{embed.VARIANT}-8199be6f699a-ort1.32.0-one-file.onnx",
            f"minilm-l6-{embed.VARIANT}-0123456789ab-ort1.19.0.onnx",
            f"e5-small-{embed.COMPUTE}-0123456789ab-ort1.32.0.onnx", "notes.txt"]
    for name in retired + kept:
        (cache / name).write_bytes(b"x")
    kept.append(f"minilm-l6-{embed.RETIRED_VARIANTS[0]}-0123456789ab-ort9.0.0.onnx")
    (cache / kept[-1]).mkdir()  # a folder by that name is not deleted, nor an error
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [subprocess.Popen([sys.executable, "-m", "mcp_bridge.contract.embed",
                               "--cache", str(cache)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    target = embed.derived_path(embed.VARIANT, cache)
    assert {o.strip().splitlines()[-1] for o, _ in outs} == {str(target)}
    assert sorted(p.name for p in cache.iterdir()) == sorted([
        ".derive.lock", target.name, embed.weights_path(target).name,
        embed_words.path_beside(target).name, *kept])
    shutil.rmtree(cache)


_PEAK_RSS = """
import sys
from pathlib import Path
from mcp_bridge.contract import embed
encoder = embed.OnnxEncoder(Path(sys.argv[1]))
encoder.encode(["warm up the session once"])
mapped = embed.weights_path(Path(sys.argv[1])).name in open("/proc/self/maps").read()
assert mapped == embed.weights_path(Path(sys.argv[1])).exists(), "weights file not mapped"
print(next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:")))
"""


def _peak_rss_kib_loading(path: Path) -> int:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)},
                          check=True)
    return int(done.stdout.split()[-1])


def test_the_derived_weights_sit_beside_the_graph_and_load_with_less_memory(
        tmp_path: Path) -> None:
    """derive writes the weights as ONNX external data: the graph file is small, the
    vectors are those of the same model saved as one file, onnxruntime maps the weights
    file instead of parsing a protobuf holding them, and a process loading it peaks
    lower (the whole file's protobuf is never held beside the tensors)."""
    import onnx

    path = embed.model_path()
    weights = embed.weights_path(path)
    assert path.stat().st_size < 1 << 20 and weights.stat().st_size > 10 << 20
    single = tmp_path / "single.onnx"
    onnx.save(onnx.load(str(path)), str(single))
    assert not embed.weights_path(single).exists()
    shutil.copy(embed_words.path_beside(path), embed_words.path_beside(single))
    texts = ["who holds the lease on api/", "The build fails unless RUSTFLAGS is set."]
    ours = embed.OnnxEncoder(path).encode(texts)
    theirs = embed.OnnxEncoder(single).encode(texts)
    assert np.allclose(ours, theirs, atol=1e-6)
    peaks = {p: [_peak_rss_kib_loading(p) for _ in range(2)] for p in (single, path)}
    # Measured ~20 MiB lower for 23 MB of weights with the word table in them, 8.0–11.6
    # MiB for the 11 MB left once it moved to a file of its own, both beside the
    # `tokenizers` package; 1.7–6.1 MiB since the Python tokenizer replaced it (its
    # allocations no longer sit between the freed protobuf and the tensors).
    assert max(peaks[path]) < min(peaks[single]), peaks


def test_a_graph_without_its_weights_file_is_derived_again(tmp_path: Path) -> None:
    """An older version's single file (or a weights or word-table file deleted by hand)
    at the derived name is not taken for a derivation: it is derived again, into all
    three files."""
    import onnx

    target = embed.derived_path(embed.VARIANT, tmp_path)
    onnx.save(onnx.load(str(embed.model_path())), str(target))  # the single-file layout
    assert not embed.is_derived(target)
    assert embed.derive_cached(embed.VARIANT, tmp_path) == target
    assert embed.is_derived(target) and target.stat().st_size < 1 << 20
    for part in (embed.weights_path(target), embed_words.path_beside(target)):
        part.unlink()
        assert not embed.is_derived(target, words=True)
        assert embed.derive_cached(embed.VARIANT, tmp_path) == target
        assert embed.is_derived(target, words=True)
    assert embed.OnnxEncoder(target).encode(["one"]).shape == (1, embed.DIMS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".derive.lock", target.name, embed.weights_path(target).name,
        embed_words.path_beside(target).name]

from __future__ import annotations

import hashlib

import numpy as np

from mcp_bridge.contract import embed


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
    the order given, each the same as when embedded alone."""
    texts = ["short", "a much longer text " * 20, "mid length text here", "x"] * 12
    together = embed.embed(texts)
    alone = np.stack([embed.embed([t])[0] for t in texts[:4]])
    assert together.shape == (len(texts), embed.DIMS)
    assert np.allclose(together[:4], alone, atol=1e-4)
    assert np.allclose(together[4:8], alone, atol=1e-4)


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

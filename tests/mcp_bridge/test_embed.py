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

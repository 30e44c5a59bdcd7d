"""The in-process embedder's thread (mcp_bridge/embed_thread.py): a search's lexical list
and its query's vector are computed at once, and a failure still reaches the search."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mcp_bridge import embed_thread, tools
from mcp_bridge.config import Config
from mcp_bridge.contract import embed

Bridge = tools.Bridge


def test_it_embeds_on_its_own_daemon_thread_what_embed_query_gives() -> None:
    seen: list[threading.Thread] = []
    original = embed.embed_query

    def spy(text: str) -> np.ndarray:
        seen.append(threading.current_thread())
        return original(text)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(embed, "embed_query", spy)
        vector = embed_thread.query_vector_soon("who holds the lease on api/").result(60)
    assert np.array_equal(vector, original("who holds the lease on api/"))
    assert seen and seen[0] is not threading.current_thread() and seen[0].daemon


def test_a_failure_reaches_the_caller_and_the_thread_carries_on() -> None:
    def broken(text: str) -> np.ndarray:
        raise RuntimeError("the model file is truncated")

    with pytest.MonkeyPatch.context() as m:
        m.setattr(embed, "embed_query", broken)
        with pytest.raises(RuntimeError, match="truncated"):
            embed_thread.query_vector_soon("stripe retry").result(60)
    assert embed_thread.query_vector_soon("stripe retry").result(60).shape == (embed.DIMS,)


def test_a_search_whose_embedder_fails_answers_lexically_and_says_why(
        live: Config, bridge: Bridge, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> np.ndarray:
        raise RuntimeError("the model file is truncated")

    monkeypatch.setenv("CTXLAKE_EMBED_SHARED", "off")
    monkeypatch.setattr(embed, "embed_query", broken)
    out = tools.memory_search(bridge, "clippy gate RUSTFLAGS")
    assert out["mode"] == "lexical"
    assert out["note"] == "lexical only: the query embedder failed to load (RuntimeError)"
    assert out["results"][0]["id"] == "cc-01"

"""The in-process embedder's thread: a bridge embeds its query while its search takes the
lexical list.

With the host's shared embedder the query is sent before the lexical list is taken and
its vector read after (embed_service.ask), so the two run at once in two processes. A
bridge embedding in its own process (CTXLAKE_EMBED_SHARED=off) computed the vector only
when the search asked for it, after the lexical list. onnxruntime and SQLite both let go
of the GIL while they compute, so one daemon thread gives the same overlap here.

It is the transport's `Worker` (a daemon thread running jobs in order): an embedding
under way never holds the process at exit, and queries are embedded one at a time.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from mcp_bridge.contract import embed
from mcp_bridge.transport import Worker

_worker = Worker("ctxlake-embed")


def query_vector_soon(text: str) -> Future[Any]:
    """`embed.embed_query(text)` computed on the embedder's thread; its result (or the
    exception it raised) when the future is read. The first loads the model (~0.2 s)."""
    future: Future[Any] = Future()

    def job() -> None:
        try:
            future.set_result(embed.embed_query(text))
        except BaseException as e:  # handed to the search, which falls back to lexical
            future.set_exception(e)

    _worker.post(job)
    return future

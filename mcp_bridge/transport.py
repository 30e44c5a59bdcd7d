"""The stdio transport: our framing in front of the SDK, and a fast first `initialize`.

Stdlib only, so a process can read its first frame ~50 ms after spawn. Three concurrent
parts, all on one asyncio loop:

1. A reader thread splits stdin into lines (bounded: an oversized line is discarded to
   its newline and answered -32600) and hands them to the loop.
2. The loop classifies each line (framing.classify): errors are answered at once,
   silence is kept, good frames are queued for the backend. While the backend (the SDK,
   loading in a thread) is not ready, an `initialize` is answered from handshake.py and
   remembered, so the SDK's own answer to the replayed request is dropped.
3. The forwarder waits for the backend, then feeds it the queue in arrival order.

Every frame written goes through write(), one whole line at a time, from the loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, Protocol

from mcp_bridge import framing, handshake

log = logging.getLogger("mcp_bridge")
Emit = Callable[[dict[str, Any]], None]
DRAIN_TIMEOUT = 30.0  # seconds to finish in-flight requests after stdin closes


class Backend(Protocol):
    async def send(self, frame: dict[str, Any]) -> None: ...
    async def close(self) -> None: ...


BackendLoader = Callable[[Emit], Awaitable[Backend]]


def _key(id_: Any) -> tuple[str, Any]:
    return (type(id_).__name__, id_)  # 1 and "1" are different requests


class Transport:
    def __init__(self, rfile: BinaryIO, wfd: int, load_backend: BackendLoader,
                 *, fast_initialize: bool = True) -> None:
        self.rfile, self.wfd = rfile, wfd
        self.load_backend = load_backend
        self.fast_initialize = fast_initialize
        self.backend: Backend | None = None
        self.swallow: set[tuple[str, Any]] = set()
        self.outstanding: set[tuple[str, Any]] = set()
        self.idle = asyncio.Event()
        self.forward: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def write(self, frame: dict[str, Any]) -> None:
        data = memoryview(framing.encode(frame))
        while data:
            data = data[os.write(self.wfd, data):]

    def emit(self, frame: dict[str, Any]) -> None:
        """A frame from the backend: answer it on, unless the fast path already did."""
        if "method" not in frame and "id" in frame:
            key = _key(frame["id"])
            self.outstanding.discard(key)
            if not self.outstanding:
                self.idle.set()
            if key in self.swallow:
                self.swallow.discard(key)
                return
        self.write(frame)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        threading.Thread(target=self._read_lines, args=(loop, lines), daemon=True).start()
        forwarder = asyncio.create_task(self._forwarder())
        while (line := await lines.get()) is not None:
            self._handle(line)
        await self.forward.put(None)
        await forwarder

    def _read_lines(self, loop: asyncio.AbstractEventLoop, out: asyncio.Queue[Any]) -> None:
        limit = framing.MAX_LINE_BYTES
        try:
            while line := self.rfile.readline(limit + 1):
                if len(line) > limit and not line.endswith(b"\n"):
                    while (rest := self.rfile.readline(limit)) and not rest.endswith(b"\n"):
                        pass  # discard the oversized remainder, bounded memory
                    line = b"\x00oversized"
                loop.call_soon_threadsafe(out.put_nowait, line)
        except (OSError, ValueError) as e:
            log.warning("stdin closed: %s", e)
        finally:
            loop.call_soon_threadsafe(out.put_nowait, None)

    def _handle(self, line: bytes) -> None:
        verdict = framing.oversized() if line == b"\x00oversized" else framing.classify(line)
        if verdict.action == "reply":
            self.write(verdict.frame)  # type: ignore[arg-type]
        elif verdict.action == "forward":
            frame = verdict.frame
            assert frame is not None
            if "id" in frame:
                self.outstanding.add(_key(frame["id"]))
                self.idle.clear()
                self._maybe_fast_initialize(frame)
            self.forward.put_nowait(frame)

    def _maybe_fast_initialize(self, frame: dict[str, Any]) -> None:
        if self.backend is not None or not self.fast_initialize:
            return
        if frame["method"] != "initialize":
            return
        result = handshake.fast_initialize(frame.get("params"))
        if result is not None:
            self.write({"jsonrpc": "2.0", "id": frame["id"], "result": result})
            self.swallow.add(_key(frame["id"]))

    async def _forwarder(self) -> None:
        try:
            backend = await self.load_backend(self.emit)
        except Exception:
            log.exception("the MCP SDK failed to load; answering every request with an error")
            backend = _Broken(self)
        self.backend = backend
        while (frame := await self.forward.get()) is not None:
            await backend.send(frame)
        if self.outstanding:
            try:
                await asyncio.wait_for(self.idle.wait(), DRAIN_TIMEOUT)
            except TimeoutError:
                log.warning("%d request(s) unanswered at shutdown", len(self.outstanding))
        await backend.close()


class _Broken:
    """The backend of last resort: every request gets an error, nothing hangs."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def send(self, frame: dict[str, Any]) -> None:
        if "id" in frame:
            self.transport.emit(framing.error(frame["id"], -32603,
                                              "Internal error: the MCP SDK failed to load"))

    async def close(self) -> None:
        return None

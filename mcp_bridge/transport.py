"""The stdio transport: our framing, the stdlib fast path, and the SDK behind them.

Stdlib only, so a process answers its first frames ~0.1 s after spawn. Four parts, all
driven from one asyncio loop:

1. A reader thread splits stdin into lines (bounded: an oversized line is discarded to
   its newline and answered -32600) and hands them to the loop.
2. The loop classifies each line (framing.classify): errors are answered at once,
   silence is kept. A good request is offered to the fast path (fastpath.py), which
   answers the opening exchange, `tools/list` and `tools/call` itself in either protocol
   era; everything else, and every request the SDK must see to keep its state (the
   opening request, each `initialize`), is queued for the SDK. When both answer, the
   SDK's answer is dropped (`swallow`); the two are pinned equal by tests.
3. The forwarder loads the SDK (importing in a daemon thread) only when a request needs
   it, then feeds it the queue in arrival order. A session the fast path answers whole
   (every client we know of: the opening, `tools/list`, `tools/call`, `ping`) never pays
   the import (~0.75 s of CPU and ~43 MiB per bridge: docs/bridge.md), and an import under way
   competes with tool calls for the GIL. Until then at most PENDING_NOTIFICATIONS
   notifications are kept for it (a bare `notifications/initialized` is the one that
   matters); later ones are dropped.
4. Tool calls run one at a time on a daemon worker thread, so a slow call (the first
   vector query loads the embedder) never stalls framing, `tools/list` or shutdown. A
   call is posted to that thread straight from the loop, and the thread writes its answer
   itself: starting the call as a loop task and handing its answer back to the loop to
   write cost each call ~0.19 ms (docs/bridge.md).

Every frame written goes through write(), one whole line at a time under a lock, from the
loop or (a tool call's answer) from the tool thread; none after the transport has stopped.

Shutdown: at end of input every in-flight request is finished (up to DRAIN_TIMEOUT); on
SIGINT/SIGTERM (stop()) the bridge stops reading and gives in-flight requests
SIGNAL_GRACE — Claude Code follows SIGINT with SIGTERM 100 ms later — then returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, Protocol, TypeVar

from mcp_bridge import framing
from mcp_bridge.fastpath import BadCall, FastPath

log = logging.getLogger("mcp_bridge")
Emit = Callable[[dict[str, Any]], None]
DRAIN_TIMEOUT = 30.0  # seconds to finish in-flight requests after stdin closes
SIGNAL_GRACE = 0.08  # seconds to finish in-flight requests after SIGINT/SIGTERM
#: Notifications kept for an SDK that has not been needed yet (the SDK itself replays 8
#: frames ahead of a connection's first request: mcp.server.runner).
PENDING_NOTIFICATIONS = 64
#: The INFO lines around the SDK's import (each followed by " at <epoch seconds>").
SDK_LOADING, SDK_LOADED = "MCP SDK loading", "MCP SDK loaded"
T = TypeVar("T")


class Backend(Protocol):
    async def send(self, frame: dict[str, Any]) -> None: ...
    async def close(self) -> None: ...


BackendLoader = Callable[[Emit], Awaitable[Backend]]


def _key(id_: Any) -> tuple[str, Any]:
    return (type(id_).__name__, id_)  # 1 and "1" are different requests


class Worker:
    """One daemon thread running jobs in order: `submit` hands a result back as a loop
    future, `post` runs a job that delivers its own.

    Daemon, unlike asyncio.to_thread's executor, so neither a slow tool call nor the SDK
    import holds the process at exit.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self._starting = threading.Lock()  # one thread, whichever thread posts first

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._put((fn, future, loop))
        return future

    def post(self, job: Callable[[], None]) -> None:
        """Run `job` in turn; it delivers its own outcome (a failure is logged)."""
        self._put((job, None, None))

    def _put(self, item: tuple[Callable[[], Any], Any, Any]) -> None:
        with self._starting:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self.thread.start()
        self.jobs.put(item)

    def _run(self) -> None:
        while True:
            fn, future, loop = self.jobs.get()
            try:
                outcome: tuple[Any, BaseException | None] = (fn(), None)
            except BaseException as e:  # handed to the awaiting coroutine
                outcome = (None, e)
            if future is None:
                if outcome[1] is not None:
                    log.error("%s: a job failed", self.name, exc_info=outcome[1])
                continue
            try:
                loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop is gone: shutting down
                return


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class Transport:
    def __init__(self, rfile: BinaryIO, wfd: int, load_backend: BackendLoader,
                 *, fast: FastPath | None = None) -> None:
        self.rfile, self.wfd = rfile, wfd
        self.load_backend = load_backend
        self.fast = fast
        self.backend: Backend | None = None
        #: Replayed requests already answered here → that answer, for the SDK's to match.
        self.swallow: dict[tuple[str, Any], dict[str, Any] | None] = {}
        self.outstanding: Counter[tuple[str, Any]] = Counter()
        self.idle = asyncio.Event()
        self.idle.set()
        self.forward: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.tools = Worker("ctxlake-tools")
        self._writing = threading.Lock()
        self._stopped = False  # set under _writing as run() returns: nothing more is written
        self.lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.need_sdk = asyncio.Event()
        self.pending_notifications = 0
        self.grace = DRAIN_TIMEOUT

    def write(self, frame: dict[str, Any]) -> None:
        data = memoryview(framing.encode(frame))
        with self._writing:
            if self._stopped:
                return
            while data:
                data = data[os.write(self.wfd, data):]

    def _begin(self, key: tuple[str, Any]) -> None:
        self.outstanding[key] += 1
        self.idle.clear()

    def _end(self, key: tuple[str, Any]) -> None:
        self.outstanding[key] -= 1
        if self.outstanding[key] <= 0:
            del self.outstanding[key]
        if not self.outstanding:
            self.idle.set()

    def emit(self, frame: dict[str, Any]) -> None:
        """A frame from the backend: answer it on, unless the fast path already did."""
        if "method" not in frame and "id" in frame:
            key = _key(frame["id"])
            if key in self.swallow:
                ours = self.swallow.pop(key)
                if ours is not None and frame.get("result") != ours:
                    log.warning("the fast path and the SDK disagree on request %r: %s",
                                frame["id"], str(frame)[:300])
                return
            if key in self.outstanding:
                self._end(key)
        self.write(frame)

    def stop(self) -> None:
        """SIGINT/SIGTERM: stop reading, finish what is in flight within SIGNAL_GRACE."""
        self.grace = min(self.grace, SIGNAL_GRACE)
        self.lines.put_nowait(None)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read_lines, args=(loop,), daemon=True).start()
        forwarder = asyncio.create_task(self._forwarder())
        while (line := await self.lines.get()) is not None:
            self._handle(line)
        self.forward.put_nowait(None)
        try:
            await asyncio.wait_for(self._finish(forwarder), self.grace)
        except TimeoutError:
            if self.outstanding:
                log.warning("%d request(s) unanswered at shutdown",
                            sum(self.outstanding.values()))
            forwarder.cancel()
        with self._writing:  # a frame being written is finished; a late answer is dropped
            self._stopped = True

    async def _finish(self, forwarder: asyncio.Task[None]) -> None:
        """Answer what the client waits for; the SDK only if it is loaded or needed."""
        await self.idle.wait()
        if self.backend is None:
            forwarder.cancel()  # nothing needs the SDK: do not start or wait for its import
            return
        await forwarder
        await self.backend.close()

    def _read_lines(self, loop: asyncio.AbstractEventLoop) -> None:
        limit = framing.MAX_LINE_BYTES
        try:
            while line := self.rfile.readline(limit + 1):
                if len(line) > limit and not line.endswith(b"\n"):
                    while (rest := self.rfile.readline(limit)) and not rest.endswith(b"\n"):
                        pass  # discard the oversized remainder, bounded memory
                    line = b"\x00oversized"
                loop.call_soon_threadsafe(self.lines.put_nowait, line)
        except (OSError, ValueError) as e:
            log.warning("stdin closed: %s", e)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop already finished (a signal)
                loop.call_soon_threadsafe(self.lines.put_nowait, None)

    def _handle(self, line: bytes) -> None:
        verdict = framing.oversized() if line == b"\x00oversized" else framing.classify(line)
        if verdict.action == "reply":
            self.write(verdict.frame)  # type: ignore[arg-type]
            return
        if verdict.action != "forward":
            return
        frame = verdict.frame
        assert frame is not None
        if "id" not in frame:  # notifications are the SDK's
            if self.backend is None and not self.need_sdk.is_set():
                self.pending_notifications += 1
                if self.pending_notifications > PENDING_NOTIFICATIONS:
                    return  # nothing has needed the SDK yet: keep memory bounded
            self.forward.put_nowait(frame)
            return
        answer = self.fast.answer(frame) if self.fast is not None else None
        if answer is None:  # the SDK's to answer: load it now if it is not loading yet
            self._begin(_key(frame["id"]))
            self.forward.put_nowait(frame)
            self.need_sdk.set()
            return
        if answer.replay:  # the SDK must see it; its answer is dropped
            self.swallow[_key(frame["id"])] = answer.result
            self.forward.put_nowait(frame)
        if answer.result is not None:
            self.write({"jsonrpc": "2.0", "id": frame["id"], "result": answer.result})
        elif answer.error is not None:
            self.write({"jsonrpc": "2.0", "id": frame["id"], "error": answer.error})
        elif answer.call is not None:
            self._call(frame["id"], answer.call)

    def _call(self, id_: Any, call: Callable[[], dict[str, Any]]) -> None:
        """Run `call` on the tool thread, which writes its answer; the loop then counts the
        request answered."""
        key = _key(id_)
        self._begin(key)
        loop = asyncio.get_running_loop()

        def job() -> None:
            reply = framing.error(id_, -32603, "Internal error")
            try:
                reply = {"jsonrpc": "2.0", "id": id_, "result": call()}
            except BadCall as e:
                reply = framing.error(id_, framing.INVALID_PARAMS, str(e))
            except Exception:
                log.exception("tools/call failed")
            finally:
                self.write(reply)
                with contextlib.suppress(RuntimeError):  # the loop is gone: shutting down
                    loop.call_soon_threadsafe(self._end, key)

        self.tools.post(job)

    async def _forwarder(self) -> None:
        if self.fast is not None:  # the fast path answers what it can; the SDK if needed
            await self.need_sdk.wait()
        # at INFO, with the epoch time: benchmarks count the requests that ran beside the
        # import (bench/bridge_bench.py); nothing is logged at the default level
        log.info("%s at %.6f", SDK_LOADING, time.time())
        try:
            backend = await self.load_backend(self.emit)
        except Exception:
            log.exception("the MCP SDK failed to load; answering every request with an error")
            backend = _Broken(self)
        log.info("%s at %.6f", SDK_LOADED, time.time())
        self.backend = backend
        while (frame := await self.forward.get()) is not None:
            await backend.send(frame)


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

"""The transport alone, with fake backends: fast initialize, ordering, no hangs."""

from __future__ import annotations

import asyncio
import io
import json
import os
from typing import Any

from mcp_bridge import toolspec
from mcp_bridge.fastpath import FastPath
from mcp_bridge.transport import Transport
from tests.mcp_bridge.stdio import INIT, frame


class Echo:
    """A backend that answers every request with its method, like a slow-loading SDK."""

    def __init__(self, emit: Any) -> None:
        self.emit, self.seen = emit, []

    async def send(self, f: dict[str, Any]) -> None:
        self.seen.append(f)
        if "id" in f:
            self.emit({"jsonrpc": "2.0", "id": f["id"], "result": {"echo": f["method"]}})

    async def close(self) -> None:
        return None


def serve(stdin: bytes, load: Any, fast: FastPath | None = None) -> list[dict[str, Any]]:
    read, write = os.pipe()

    async def main() -> None:
        await Transport(io.BytesIO(stdin), write, load, fast=fast).run()

    asyncio.run(main())
    os.close(write)
    with os.fdopen(read, "rb") as f:
        return [json.loads(line) for line in f.read().splitlines()]


def test_it_answers_initialize_before_the_backend_loads_and_drops_its_answer() -> None:
    backends: list[Echo] = []

    async def slow_load(emit: Any) -> Echo:
        await asyncio.sleep(0.3)  # the SDK import
        backends.append(Echo(emit))
        return backends[0]

    out = serve(INIT + frame(None, "notifications/initialized") + frame(2, "tools/list")
                + frame("x", "resources/list"), slow_load, FastPath(lambda: None))
    assert [r["id"] for r in out] == [1, 2, "x"]
    assert out[0]["result"]["serverInfo"]["name"] == "ctxlake"  # ours, not the echo
    assert len(out[1]["result"]["tools"]) == len(toolspec.TOOLS)  # ours too: tools/list never waits
    assert out[2]["result"] == {"echo": "resources/list"}
    # The SDK sees initialize (to keep its state), never the tools/list answered for it.
    assert [f["method"] for f in backends[0].seen] == [
        "initialize", "notifications/initialized", "resources/list"]


def test_it_answers_every_request_with_an_error_when_the_sdk_cannot_load() -> None:
    async def broken(emit: Any) -> Echo:
        raise ImportError("no mcp here")

    out = serve(INIT + frame(2, "tools/list") + frame(None, "notifications/initialized"),
                broken)
    assert [r["id"] for r in out] == [1, 2]
    assert out[1]["error"]["code"] == -32603


def test_it_answers_oversized_lines_and_keeps_going() -> None:
    async def load(emit: Any) -> Echo:
        return Echo(emit)

    huge = b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"' + b"a" * (5 << 20) + b'"}\n'
    out = serve(huge + frame(2, "ping"), load)
    assert out[0] == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": out[0]["error"]["message"]}}
    assert out[1]["id"] == 2


ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}


class SlowBridge:
    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        import time

        time.sleep(0.3)  # the first vector query loading the embedder
        return {"tool": name}


def test_a_slow_tool_call_never_holds_up_tools_list() -> None:
    async def load(emit: Any) -> Echo:
        return Echo(emit)

    out = serve(INIT + frame(2, "tools/call", {"name": "fleet_status", "arguments": {}})
                + frame(3, "tools/list"), load, FastPath(SlowBridge))
    assert [r["id"] for r in out] == [1, 3, 2]
    assert out[2]["result"]["structuredContent"] == {"tool": "fleet_status"}


def test_after_a_discover_opening_initialize_is_refused_without_the_sdk() -> None:
    """Claude Code's fallback `initialize` beside its discover: refused at once with the
    SDK's -32022, and nothing loads the SDK for it."""
    loads: list[Echo] = []

    async def load(emit: Any) -> Echo:
        loads.append(Echo(emit))
        return loads[0]

    out = serve(frame("d", "server/discover", {"_meta": ENVELOPE}) + INIT, load,
                FastPath(SlowBridge))
    assert [r["id"] for r in out] == ["d", 1]
    assert out[0]["result"]["supportedVersions"] == ["2026-07-28"]
    assert out[1]["error"]["code"] == -32022
    assert loads == []


def test_a_session_the_fast_path_answers_whole_never_loads_the_sdk() -> None:
    loads: list[Echo] = []

    async def load(emit: Any) -> Echo:
        loads.append(Echo(emit))
        return loads[0]

    notes = b"".join(frame(None, "notifications/progress") for _ in range(200))
    out = serve(INIT + frame(None, "notifications/initialized") + notes + frame(2, "tools/list")
                + frame(3, "ping") + frame(4, "tools/call", {"name": "fleet_status",
                                                             "arguments": {}}),
                load, FastPath(SlowBridge))
    assert [r["id"] for r in out] == [1, 2, 3, 4]
    assert loads == []


def test_a_request_the_fast_path_cannot_answer_loads_it_with_what_it_must_see() -> None:
    """The SDK, loaded late, still sees the opening and the first notifications (at most
    PENDING_NOTIFICATIONS of them), in arrival order."""
    from mcp_bridge.transport import PENDING_NOTIFICATIONS

    loads: list[Echo] = []

    async def load(emit: Any) -> Echo:
        loads.append(Echo(emit))
        return loads[0]

    notes = b"".join(frame(None, "notifications/progress") for _ in range(200))
    out = serve(INIT + frame(None, "notifications/initialized") + notes
                + frame("r", "resources/list"), load, FastPath(SlowBridge))
    assert [r["id"] for r in out] == [1, "r"]
    seen = [f["method"] for f in loads[0].seen]
    assert seen[:2] == ["initialize", "notifications/initialized"]
    assert len(seen) == 1 + PENDING_NOTIFICATIONS + 1 and seen[-1] == "resources/list"


def test_after_an_initialize_opening_discover_is_left_to_the_sdk() -> None:
    async def load(emit: Any) -> Echo:
        return Echo(emit)

    out = serve(INIT + frame("d", "server/discover", {"_meta": ENVELOPE}), load,
                FastPath(SlowBridge))
    assert out[0]["result"]["serverInfo"]["name"] == "ctxlake"
    assert out[1] == {"jsonrpc": "2.0", "id": "d", "result": {"echo": "server/discover"}}


def test_it_says_so_when_the_sdk_would_have_answered_differently(caplog: Any) -> None:
    """A replayed opening's SDK answer is dropped; if it ever differs, the log says so."""
    async def load(emit: Any) -> Echo:
        return Echo(emit)  # answers initialize with {"echo": ...}, not the real result

    with caplog.at_level("WARNING", logger="mcp_bridge"):
        out = serve(INIT + frame(2, "resources/list"), load,  # only the SDK answers this
                    FastPath(SlowBridge))
    assert out[0]["result"]["serverInfo"]["name"] == "ctxlake"
    assert "disagree" in caplog.text


class ThreadBridge:
    """Answers each call with the thread it ran on."""

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        import threading

        return {"ran_on": threading.current_thread().name}


def test_the_tool_thread_writes_its_answer_and_every_frame_stays_whole(
        monkeypatch: Any) -> None:
    """A tool call's answer is written by the tool thread (not after waking the loop),
    beside pings the loop answers meanwhile: each frame is one whole line, each request
    is answered once."""
    import threading

    writers: dict[Any, str] = {}
    write = Transport.write

    def recording(self: Transport, reply: dict[str, Any]) -> None:
        writers[reply.get("id")] = threading.current_thread().name
        write(self, reply)

    monkeypatch.setattr(Transport, "write", recording)

    async def load(emit: Any) -> Echo:
        return Echo(emit)

    calls = b"".join(frame(f"c{i}", "tools/call", {"name": "fleet_status", "arguments": {}})
                     + frame(f"p{i}", "ping") for i in range(200))
    out = serve(INIT + calls, load, FastPath(ThreadBridge))
    assert sorted(str(r["id"]) for r in out) == sorted(
        ["1", *(f"c{i}" for i in range(200)), *(f"p{i}" for i in range(200))])
    answers = [r for r in out if str(r["id"]).startswith("c")]
    assert {r["result"]["structuredContent"]["ran_on"] for r in answers} == {"ctxlake-tools"}
    assert {writers[f"c{i}"] for i in range(200)} == {"ctxlake-tools"}
    assert writers["p0"] == threading.main_thread().name


def test_an_answer_finished_after_the_transport_stopped_is_not_written() -> None:
    """SIGTERM's grace over, the loop returns; a tool call still running writes nothing
    afterwards, not even part of a line."""
    import threading

    read, write = os.pipe()
    release, finished = threading.Event(), threading.Event()

    class Held:
        def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            release.wait(30)  # until the transport has stopped
            return {"late": True}

    async def main() -> Transport:
        async def load(emit: Any) -> Echo:
            return Echo(emit)

        rfile = io.BytesIO(INIT + frame(2, "tools/call", {"name": "fleet_status",
                                                          "arguments": {}}))
        transport = Transport(rfile, write, load, fast=FastPath(Held))
        asyncio.get_running_loop().call_later(0.1, transport.stop)
        transport.grace = 0.0  # as if the grace had already passed
        await transport.run()
        return transport

    transport = asyncio.run(main())
    release.set()
    transport.tools.post(finished.set)  # runs once the held call's job, write included, is done
    assert finished.wait(30)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        assert [json.loads(line)["id"] for line in f.read().splitlines()] == [1]


def test_a_tool_job_that_fails_outright_is_logged_and_the_thread_goes_on(caplog: Any) -> None:
    import threading

    from mcp_bridge.transport import Worker

    worker, done = Worker("t"), threading.Event()

    def fails() -> None:
        raise SystemExit(3)

    worker.post(fails)
    worker.post(done.set)
    assert done.wait(5)
    assert "t: a job failed" in caplog.text

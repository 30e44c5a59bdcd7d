"""The real process over real pipes: framing, error classes, and the SDK's own client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from mcp_bridge import toolspec, transport
from mcp_bridge.config import Config
from tests.mcp_bridge.stdio import INIT, ROOT, bridge_env, call, frame, run_session

CITE = {"session_id": "s1", "message_id": "m1"}

# (line, expected answer): "result", "tool-error" (isError), an error code, or None (silence).
SESSION: list[tuple[bytes, Any]] = [
    (INIT, "result"),
    (frame(None, "notifications/initialized"), None),
    (frame("p-1", "ping"), "result"),
    (frame(2, "tools/list"), "result"),
    (b"this is not json\n", -32700),
    (b"\xff\xfe\xfa not utf-8 \x80\n", -32700),
    (b'{"jsonrpc":"2.0","id":3,"method":"ping"\n', -32700),
    (b"[]\n", -32600),
    (b'[{"jsonrpc":"2.0","id":4,"method":"ping"}]\n', -32600),
    (b"12345\n", -32600),
    (b'{"jsonrpc":"2.0","id":5}\n', -32600),
    (b'{"jsonrpc":"2.0"}\n', None),
    (b'{"jsonrpc":"2.0","id":99,"result":{}}\n', None),
    (b'{"jsonrpc":"2.0","id":98,"error":{"code":-1,"message":"x"}}\n', None),
    (frame(None, "notifications/unknown"), None),
    (frame(None, "tools/call", {"name": "fleet_status"}), None),
    (frame(6, "no/such/method"), -32601),
    (call(7, "no_such_tool", {}), -32602),
    (call(8, "fleet_claim", {"paths": ["src/**"]}), -32602),
    (call(9, "fleet_history", {"limit": "ten"}), -32602),
    (call("ten", "fleet_status", {}), "result"),
    (call(11, "memory_search", {"query": "stripe webhooks"}), "result"),
    (call(12, "memory_propose", {"claim": "c", "type": "fact", "subject": "s",
                                 "evidence": []}), "tool-error"),
    (call(13, "fleet_claim", {"paths": ["src/**"], "reason": "fix \ud800 it"}), "result"),
    (b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"fleet_handoff",'
     b'"arguments":{"summary":"lone \\udfff surrogate","status":"done"}}}\n', "result"),
    (b'{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"fleet_status",'
     b'"arguments":{}},"pad":"' + b"x" * (5 * 1024 * 1024) + b'"}\n', -32600),
    (call(16, "memory_propose", {"claim": "Use uv.", "type": "preference",
                                 "subject": "tooling", "evidence": [CITE]}), "result"),
    (call(17, "memory_timeline", {"subject": "payments"}), "result"),
    (b"\n", None),
    (call(18, "fleet_release", {}), "result"),
    (call(19, "memory_propose", {"claim": "The cache is promoted to the CDN nightly.",
                                 "type": "fact", "subject": "cdn", "evidence": [CITE]}),
     "result"),
    (call(20, "memory_propose", {"claim": "c", "type": "fact", "subject": "s",
                                 "evidence": [CITE], "status": "promoted"}), -32602),
]


def classify(response: dict[str, Any]) -> Any:
    if "error" in response:
        return response["error"]["code"]
    return "tool-error" if response["result"].get("isError") else "result"


def parse_stdout(stdout: bytes) -> list[dict[str, Any]]:
    frames = []
    for line in stdout.split(b"\n")[:-1]:
        value = json.loads(line.decode("utf-8"))  # strict UTF-8, exactly one value per line
        assert isinstance(value, dict) and value["jsonrpc"] == "2.0"
        assert ("result" in value) != ("error" in value) and "id" in value
        frames.append(value)
    assert stdout.endswith(b"\n") or not stdout
    return frames


def expected_id(line: bytes, answer: Any) -> Any:
    """The id the answer must carry: null for unparseable lines, batches and huge lines."""
    if answer in (-32700, -32600) and (b"pad" in line or not line.startswith(b"{")):
        return None
    try:
        return json.loads(line.decode("utf-8", "surrogatepass")).get("id")
    except ValueError:
        return None


def test_it_answers_every_line_of_a_hostile_session_with_exactly_its_frame(live: Config,
                                                                         ) -> None:
    done = run_session(live, b"".join(line for line, _ in SESSION))
    assert done.returncode == 0, done.stderr.decode()
    responses = parse_stdout(done.stdout)
    expected = sorted((json.dumps(expected_id(line, answer)), str(answer))
                      for line, answer in SESSION if answer is not None)
    got = sorted((json.dumps(r["id"]), str(classify(r))) for r in responses)
    assert got == expected  # every answer once, of the right class; silence stays silent


def test_it_keeps_serving_after_garbage_and_answers_init_first(live: Config) -> None:
    done = run_session(live, INIT + b"{{{\n" + frame(2, "ping"))
    responses = parse_stdout(done.stdout)
    assert [r["id"] for r in responses] == [1, None, 2]
    assert responses[0]["result"]["serverInfo"]["name"] == "ctxlake"


def test_it_keeps_stdout_for_frames_only_and_logs_to_stderr(config: Config) -> None:
    done = run_session(config, INIT + call(2, "fleet_status", {}), timeout=60)
    parse_stdout(done.stdout)
    assert done.returncode == 0


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_it_works_with_the_official_sdk_stdio_client(live: Config, mode: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_bridge"],
                                   env=bridge_env(live))

    async def main() -> tuple[Any, Any, Any]:
        async with Client(params, mode=mode) as client:
            listed = await client.list_tools()
            found = await client.call_tool("memory_search", {"query": "clippy gate"})
            refused = await client.call_tool("memory_propose", {
                "claim": "c", "type": "fact", "subject": "s", "evidence": [{}]})
            return listed, found, refused

    listed, found, refused = asyncio.run(main())
    assert len(listed.tools) == len(toolspec.TOOLS)
    assert found.structured_content["results"][0]["id"] == "cc-01"
    assert refused.is_error and "session_id" in refused.content[0].text


def _spooled_ids(cfg: Config) -> set[str]:
    ids = set()
    for path in (cfg.spool_dir / "mcp").glob("*.ndjson"):
        for line in path.read_bytes().splitlines():
            ids.add(json.loads(line)["id"])  # every line whole
    return ids


@pytest.mark.parametrize("signals", [("SIGINT",), ("SIGTERM",), ("SIGINT", "SIGTERM")],
                         ids=["sigint", "sigterm", "claude-code-sigint-then-sigterm"])
def test_a_signal_finishes_what_is_in_flight_and_exits_quietly(live: Config,
                                                                signals: tuple[str, ...],
                                                                ) -> None:
    """Claude Code stops a server with SIGINT and, 100 ms later, SIGTERM: answer what was
    read, lose no write, exit 0 without a traceback."""
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "mcp_bridge"], cwd=ROOT, env=bridge_env(live),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(INIT + frame(None, "notifications/initialized") + call(
        1, "fleet_status", {}))
    proc.stdin.flush()
    proc.stdout.readline(), proc.stdout.readline()  # the session is up, tools are loaded
    writes = [call(10 + i, "fleet_claim", {"paths": [f"src/m{i}/**"], "reason": "r"})
              for i in range(5)]
    proc.stdin.write(b"".join(writes) + frame(20, "tools/list"))
    proc.stdin.flush()
    first = json.loads(proc.stdout.readline())  # the batch is being read and answered
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(0.1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, err.decode()
    answers = [first, *parse_stdout(out)]
    assert len({json.dumps(a["id"]) for a in answers}) == len(answers)  # each once
    queued = {a["result"]["structuredContent"]["event_id"] for a in answers
              if a["id"] in range(10, 15)}
    assert queued <= _spooled_ids(live)  # every write answered "queued" really is


def _sdk_marks(stderr: bytes) -> list[tuple[str, float]]:
    found = []
    for line in stderr.decode(errors="replace").splitlines():
        for mark in (transport.SDK_LOADING, transport.SDK_LOADED):
            if f"{mark} at " in line:
                found.append((mark, float(line.rsplit(" at ", 1)[1])))
    return found


def test_at_info_the_bridge_says_when_it_imports_the_sdk_and_only_then(live: Config) -> None:
    """What bench/bridge_bench.py reads to count the requests that ran beside the import."""

    def session(stdin: bytes, **env: str) -> bytes:
        return subprocess.run([sys.executable, "-m", "mcp_bridge"], input=stdin,
                              capture_output=True, env=bridge_env(live, **env), timeout=120,
                              cwd=ROOT).stderr

    whole = INIT + frame(2, "tools/list") + frame(3, "ping")  # the fast path answers all
    assert _sdk_marks(session(whole, CTXLAKE_LOG_LEVEL="INFO")) == []
    needs_sdk = INIT + frame(2, "resources/list")  # only the SDK answers this
    marks = _sdk_marks(session(needs_sdk, CTXLAKE_LOG_LEVEL="INFO"))
    assert [m for m, _ in marks] == [transport.SDK_LOADING, transport.SDK_LOADED]
    assert marks[0][1] <= marks[1][1]
    assert _sdk_marks(session(needs_sdk)) == []  # the default level logs nothing

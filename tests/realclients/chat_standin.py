"""A scripted stand-in for OpenAI's Chat Completions API on 127.0.0.1, for driving Hermes Agent.

The model is the one service a real-client test may replace (messages_standin.py does it for
Claude Code, responses_standin.py for Codex): Hermes, its tools, its hooks, its state.db and
the bridge all run for real. Hermes reaches it as a custom OpenAI-compatible endpoint
(`model.provider: custom`, `model.base_url` = this server's `/v1`) and POSTs each step of
its loop to `/v1/chat/completions`.

How a reply is chosen: requests that offer `tools` are the agent loop; the next step is the
number of this script's tool calls already answered by a `role: "tool"` message, so a
retried request gets the same answer. Requests without tools (titles, summaries) get a
short text. Both answer shapes are spoken: one JSON `chat.completion`, or, when the request
says `"stream": true`, `chat.completion.chunk` server-sent events ending in `data: [DONE]`.
Every request is recorded for the test to inspect.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.realclients.local_server import LocalServer

#: Tool-call ids the stand-in writes start with this; it counts its own steps by them.
CALL_ID_PREFIX = "call_standin_"
SIDE_REPLY = "ok"


@dataclass(frozen=True)
class Call:
    """The model asks the client to run one tool with these arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Say:
    """The model answers with text and ends its turn."""

    text: str


Step = Call | Say


@dataclass(frozen=True)
class Recorded:
    """One HTTP request the client made."""

    method: str
    path: str
    body: Any

    @property
    def is_agent_loop(self) -> bool:
        return self.path.split("?", 1)[0].endswith("/chat/completions") and bool(
            self.tool_names())

    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [str((t.get("function") or {}).get("name")) for t in tools or []
                if isinstance(t, dict)]

    def messages(self) -> list[dict[str, Any]]:
        raw = self.body.get("messages") if isinstance(self.body, dict) else None
        return [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []

    def answered(self) -> set[str]:
        return {str(m.get("tool_call_id")) for m in self.messages() if m.get("role") == "tool"}

    def dump(self) -> str:
        return json.dumps(self.body, ensure_ascii=False)


def call_id(step: int) -> str:
    return f"{CALL_ID_PREFIX}{step}"


@dataclass
class Standin(LocalServer):
    """The server; use as a context manager. `base_url` goes into Hermes' model config."""

    script: Sequence[Step]
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def __post_init__(self) -> None:
        if not self.script or not isinstance(self.script[-1], Say):
            raise ValueError("a script ends with a Say: the turn must end")

    @property
    def base_url(self) -> str:
        return self.address + "/v1"

    def turns(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.is_agent_loop]

    def next_step(self, request: Recorded) -> tuple[int, Step]:
        if not request.is_agent_loop:
            return -1, Say(SIDE_REPLY)
        answered = request.answered()
        calls = [i for i, s in enumerate(self.script) if isinstance(s, Call)]
        done = sum(1 for i in calls if call_id(i) in answered)
        index = calls[done] if done < len(calls) else len(self.script) - 1
        return index, self.script[index]


def message(index: int, step: Step) -> dict[str, Any]:
    """The assistant message answering with `step`."""
    if isinstance(step, Call):
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id(index), "type": "function",
            "function": {"name": step.name, "arguments": json.dumps(step.arguments)}}]}
    return {"role": "assistant", "content": step.text}


def completion(n: int, model: str, msg: dict[str, Any]) -> dict[str, Any]:
    reason = "tool_calls" if msg.get("tool_calls") else "stop"
    return {"id": f"chatcmpl-standin-{n}", "object": "chat.completion", "created": 0,
            "model": model, "choices": [{"index": 0, "message": msg, "finish_reason": reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chunks(n: int, model: str, msg: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The same answer as a chunk stream: the role, the content or tool calls, the stop."""
    head = {"id": f"chatcmpl-standin-{n}", "object": "chat.completion.chunk", "created": 0,
            "model": model}
    delta: dict[str, Any] = {"role": "assistant"}
    if msg.get("tool_calls"):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(msg["tool_calls"])]
    else:
        delta["content"] = msg["content"]
    yield {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    reason = "tool_calls" if msg.get("tool_calls") else "stop"
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class _Handler(BaseHTTPRequestHandler):
    owner: Standin
    server_version = "chat-standin/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        self.owner.record(Recorded(self.command, self.path, None))
        if self.path.split("?", 1)[0].endswith("/models"):
            self._json(200, {"object": "list", "data": [
                {"id": "standin-model", "object": "model", "owned_by": "standin"}]})
        else:
            self._json(404, {"error": {"message": f"no {self.path} in the stand-in"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        request = Recorded(self.command, self.path, body)
        self.owner.record(request)
        if not self.path.split("?", 1)[0].endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no {self.path} in the stand-in"}})
            return
        index, step = self.owner.next_step(request)
        n, model = len(self.owner.requests), str(body.get("model") or "standin-model")
        msg = message(index, step)
        if not body.get("stream"):
            self._json(200, completion(n, model, msg))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in chunks(n, model, msg):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _json(self, status: int, value: dict[str, Any]) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


Standin.handler = _Handler
Standin.thread_name = "chat-standin"

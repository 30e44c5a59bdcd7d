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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests.realclients import local_server
from tests.realclients.local_server import SIDE_REPLY, JsonHandler, LocalServer, Say, step_index

#: Tool-call ids the stand-in writes start with this; it counts its own steps by them.
CALL_ID_PREFIX = "call_standin_"


@dataclass(frozen=True)
class Call:
    """The model asks the client to run one tool with these arguments."""

    name: str
    arguments: dict[str, Any]


Step = Call | Say


@dataclass(frozen=True)
class Recorded(local_server.Recorded):
    """One HTTP request Hermes made."""

    @property
    def is_agent_loop(self) -> bool:
        return self.route.endswith("/chat/completions") and bool(self.tool_names())

    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [str((t.get("function") or {}).get("name")) for t in tools or []
                if isinstance(t, dict)]

    def messages(self) -> list[dict[str, Any]]:
        raw = self.body.get("messages") if isinstance(self.body, dict) else None
        return [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []

    def answered(self) -> set[str]:
        return {str(m.get("tool_call_id")) for m in self.messages() if m.get("role") == "tool"}


def call_id(step: int) -> str:
    return f"{CALL_ID_PREFIX}{step}"


@dataclass
class Standin(LocalServer):
    """The server; use as a context manager. `base_url` goes into Hermes' model config."""

    script: Sequence[Step]

    @property
    def base_url(self) -> str:
        return self.address + "/v1"

    def turns(self) -> list[Recorded]:
        return self.recorded(lambda r: r.is_agent_loop)

    def next_step(self, request: Recorded) -> tuple[int, Step]:
        if not request.is_agent_loop:
            return -1, Say(SIDE_REPLY)
        index = step_index(self.script, request.answered(), call_id)
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


class _Handler(JsonHandler):
    owner: Standin
    server_version = "chat-standin/1"
    record_type = Recorded

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        request = self._record(None)
        if request.route.endswith("/models"):
            self._json(200, {"object": "list", "data": [
                {"id": "standin-model", "object": "model", "owned_by": "standin"}]})
        else:
            self._json(404, self.error("not_found", f"no {self.path} in the stand-in"))

    def do_POST(self) -> None:  # noqa: N802
        request = self._read()
        if request is None:
            return
        assert isinstance(request, Recorded)
        body = request.body
        if not request.route.endswith("/chat/completions"):
            self._json(404, self.error("not_found", f"no {self.path} in the stand-in"))
            return
        index, step = self.owner.next_step(request)
        n, model = len(self.owner.requests), str(body.get("model") or "standin-model")
        msg = message(index, step)
        if not body.get("stream"):
            self._json(200, completion(n, model, msg))
            return
        self._start_events()
        for chunk in chunks(n, model, msg):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


Standin.handler = _Handler
Standin.thread_name = "chat-standin"

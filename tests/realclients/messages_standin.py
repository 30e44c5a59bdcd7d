"""A scripted stand-in for the Anthropic Messages API on 127.0.0.1, for driving real clients.

The model behind Claude Code is the one external service a test may replace: everything
else in a real-client test (the CLI, its MCP client, its hooks, the bridge) runs for real.
The stand-in plays a fixed script instead of a model, so a test decides which tools the
"model" asks for and can then check what the real client did with them.

How a reply is chosen: Claude Code sends two kinds of requests, the agent loop (it offers
`tools`) and side queries (titles, summaries, quota probes: no tools). Side queries get a
short text. In the agent loop, the next step is the number of this script's tool calls that
already carry a `tool_result` in the conversation, so a retried request gets the same
answer and each step is answered once the client has run the previous one. Adding a step
to a test (say, an Edit that a PreToolUse hook should warn about) is one more `ToolUse`
in its script.

Both response shapes are spoken: a JSON message, or, when the request says
`"stream": true`, server-sent events in the documented order (message_start; per content
block content_block_start, content_block_delta, content_block_stop; message_delta with the
stop reason; message_stop). Every request is recorded for the test to inspect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests.realclients import local_server
from tests.realclients.local_server import SIDE_REPLY, JsonHandler, LocalServer, Say, step_index

#: Tool-use ids the stand-in writes start with this; it counts its own steps by them.
TOOL_ID_PREFIX = "toolu_standin_"


@dataclass(frozen=True)
class ToolUse:
    """The model asks the client to run one tool with this input."""

    name: str
    input: dict[str, Any]


Step = ToolUse | Say


@dataclass(frozen=True)
class Recorded(local_server.Recorded):
    """One HTTP request Claude Code made."""

    @property
    def is_agent_loop(self) -> bool:
        return self.route == "/v1/messages" and bool(self._tools())

    def _tools(self) -> list[Any]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return tools if isinstance(tools, list) else []

    def tool_names(self) -> list[str]:
        return [str(t.get("name")) for t in self._tools() if isinstance(t, dict)]

    def tool_results(self) -> dict[str, Any]:
        """tool_use_id → the tool_result block, over the whole conversation sent."""
        out: dict[str, Any] = {}
        for message in self.body.get("messages", []) if isinstance(self.body, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out[str(block.get("tool_use_id"))] = block
        return out


def tool_id(step: int) -> str:
    return f"{TOOL_ID_PREFIX}{step}"


def result_text(block: dict[str, Any]) -> str:
    """The text of a tool_result block (a string, or a list of text blocks)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


@dataclass
class Standin(LocalServer):
    """The server; use as a context manager. `url` goes into ANTHROPIC_BASE_URL."""

    script: Sequence[Step]

    @property
    def url(self) -> str:
        return self.address

    def agent_requests(self) -> list[Recorded]:
        return self.recorded(lambda r: r.is_agent_loop)

    def next_step(self, request: Recorded) -> tuple[int, Step]:
        """The step this request is answered with (see the module docstring)."""
        if not request.is_agent_loop:
            return -1, Say(SIDE_REPLY)
        index = step_index(self.script, request.tool_results(), tool_id)
        return index, self.script[index]


def message(model: str, index: int, step: Step) -> dict[str, Any]:
    """The complete Message for one step (the non-streaming answer)."""
    if isinstance(step, ToolUse):
        block: dict[str, Any] = {"type": "tool_use", "id": tool_id(index), "name": step.name,
                                 "input": step.input}
        stop = "tool_use"
    else:
        block, stop = {"type": "text", "text": step.text}, "end_turn"
    return {"id": f"msg_standin_{index}", "type": "message", "role": "assistant",
            "model": model, "content": [block], "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5}}


def sse_events(whole: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The same Message as the event stream a streaming request receives."""
    start = {**whole, "content": [], "stop_reason": None,
             "usage": {"input_tokens": whole["usage"]["input_tokens"], "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(whole["content"]):
        if block["type"] == "tool_use":
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            empty, delta = {"type": "text", "text": ""}, {"type": "text_delta",
                                                          "text": block["text"]}
        yield "content_block_start", {"type": "content_block_start", "index": i,
                                      "content_block": empty}
        yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                      "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": whole["stop_reason"],
                                      "stop_sequence": None},
                            "usage": {"output_tokens": whole["usage"]["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


class _Handler(JsonHandler):
    owner: Standin
    server_version = "messages-standin/1"
    record_type = Recorded
    reply_headers = (("request-id", "req_standin"),)

    def error(self, kind: str, text: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": text}}

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        self._record(None)
        self._json(404, self.error("not_found_error", f"no {self.path} in the stand-in"))

    def do_HEAD(self) -> None:  # noqa: N802
        self._record(None)
        self.send_response(200)
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        request = self._read()
        if request is None:
            return
        assert isinstance(request, Recorded)
        body = request.body
        if request.route == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": 100})
        elif request.route == "/v1/messages":
            index, step = self.owner.next_step(request)
            whole = message(str(body.get("model", "standin")), index, step)
            if body.get("stream"):
                self._stream(whole)
            else:
                self._json(200, whole)
        else:
            self._json(404, self.error("not_found_error", f"no {request.route} in the stand-in"))

    def _stream(self, whole: dict[str, Any]) -> None:
        self._start_events()
        for event, data in sse_events(whole):
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()


Standin.handler = _Handler
Standin.thread_name = "messages-standin"

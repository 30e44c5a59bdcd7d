"""A scripted stand-in for the OpenAI Responses API on 127.0.0.1, for driving the real Codex CLI.

The model behind Codex is the one external service a test may replace (as messages_standin.py
does for Claude Code): the CLI, its shell tool, its rollout file and its hooks all run for
real. Codex reaches it as a custom model provider (`wire_api = "responses"`, `base_url` =
this server's `/v1`), and POSTs each turn of its agent loop to `/v1/responses` with
`"stream": true`.

How a reply is chosen: the next step is the number of this script's tool calls whose
output (`function_call_output`, or `custom_tool_call_output` for apply_patch) the request
already carries in its `input`, so a retried request gets the same answer and each step is
answered once Codex has run the previous one. The shell tool is the one Codex offers in
`tools` (`shell_command` takes a command line, `exec_command` a `cmd`, the older `shell`
an argv), so the script names only the command. `Patch` calls Codex's freeform
`apply_patch` tool, which Codex offers only for some model slugs (the test picks one).

The reply is the server-sent event stream Codex's Responses client reads: response.created;
per output item response.output_item.added, (for a message) response.output_text.delta,
response.output_item.done; then response.completed with the response id and its usage.
The items are a `function_call` (name, JSON `arguments`, `call_id`), a `custom_tool_call`
(name, raw `input`, `call_id`) or an assistant `message` with one `output_text` part.
Every request is recorded for the test to inspect.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.realclients.local_server import LocalServer

#: Call ids the stand-in writes start with this; it counts its own steps by them.
CALL_ID_PREFIX = "call_standin_"
#: Shell tools Codex may offer, best first, and how each one's arguments spell a command.
SHELL_TOOLS = ("shell_command", "exec_command", "shell")
#: What a request without tools (Codex compacting its context) is answered with, plus the
#: call ids answered so far: compaction drops the tool outputs from the history, and the
#: summary (which Codex keeps) is how the script still knows where it is.
COMPACT_SUMMARY = "standin summary of the session so far"
_DONE = re.compile(r"\[standin done: ([^\]]*)\]")
#: Input tokens a "full context" reply reports: over any small auto-compact limit.
FULL_CONTEXT_TOKENS = 500_000


@dataclass(frozen=True)
class Shell:
    """The model asks Codex to run one shell command line."""

    command: str


@dataclass(frozen=True)
class Patch:
    """The model asks Codex to apply an apply_patch envelope (`*** Begin Patch` ...)."""

    patch: str


@dataclass(frozen=True)
class Say:
    """The model answers with text and ends its turn."""

    text: str


Step = Shell | Patch | Say


@dataclass(frozen=True)
class Recorded:
    """One HTTP request the client made."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def is_turn(self) -> bool:
        return self.path.split("?", 1)[0].endswith("/responses") and isinstance(self.body, dict)

    @property
    def is_agent_loop(self) -> bool:
        """A turn that offers tools; Codex's compaction request offers none."""
        return self.is_turn and bool(self.tool_names())

    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [str(t.get("name")) for t in tools or [] if isinstance(t, dict)]

    def items(self) -> list[dict[str, Any]]:
        raw = self.body.get("input") if isinstance(self.body, dict) else None
        return [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []

    def answered(self) -> set[str]:
        """Call ids with an output in the request, or named by an earlier compaction summary."""
        done = set(self.outputs())
        for item in self.items():
            if item.get("type") == "message":
                for part in item.get("content") or []:
                    text = part.get("text") if isinstance(part, dict) else None
                    for found in _DONE.findall(text if isinstance(text, str) else ""):
                        done.update(found.split())
        return done

    def outputs(self) -> dict[str, str]:
        """call_id → a tool call's output text, over the whole conversation sent."""
        out: dict[str, str] = {}
        for item in self.items():
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                raw = item.get("output")
                out[str(item.get("call_id"))] = raw if isinstance(raw, str) else json.dumps(raw)
        return out

    def dump(self) -> str:
        return json.dumps(self.body, ensure_ascii=False)


def call_id(step: int) -> str:
    return f"{CALL_ID_PREFIX}{step}"


def shell_arguments(tool: str, command: str) -> dict[str, Any]:
    """The arguments object `tool` takes for running `command`."""
    if tool == "shell":
        return {"command": ["bash", "-lc", command]}
    if tool == "exec_command":
        return {"cmd": command}
    return {"command": command}


@dataclass
class Standin(LocalServer):
    """The server; use as a context manager. `base_url` goes into the provider's config."""

    script: Sequence[Step]
    #: Script steps whose reply reports FULL_CONTEXT_TOKENS of input (Codex then compacts).
    full_context_at: frozenset[int] = frozenset()
    #: Called with the step index before a step is answered: a test's way to make the
    #: "model" take its time until something outside Codex has happened.
    before_reply: Callable[[int], None] | None = None
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
            return [r for r in self.requests if r.is_turn]

    def next_step(self, request: Recorded) -> tuple[int, Step]:
        """The step this request is answered with (see the module docstring)."""
        answered = request.answered()
        if not request.is_agent_loop:
            return -1, Say(f"{COMPACT_SUMMARY} [standin done: {' '.join(sorted(answered))}]")
        steps = [i for i, s in enumerate(self.script) if not isinstance(s, Say)]
        done = sum(1 for i in steps if call_id(i) in answered)
        index = steps[done] if done < len(steps) else len(self.script) - 1
        return index, self.script[index]


def output_item(request: Recorded, index: int, step: Step) -> dict[str, Any]:
    """The one output item answering with `step`."""
    offered = request.tool_names()
    if isinstance(step, Patch):
        if "apply_patch" not in offered:
            raise LookupError(f"Codex offered no apply_patch tool: {offered}")
        return {"type": "custom_tool_call", "id": f"ctc_standin_{index}",
                "status": "completed", "call_id": call_id(index), "name": "apply_patch",
                "input": step.patch}
    if isinstance(step, Shell):
        tool = next((t for t in SHELL_TOOLS if t in offered), None)
        if tool is None:
            raise LookupError(f"Codex offered no shell tool the stand-in knows: {offered}")
        return {"type": "function_call", "id": f"fc_standin_{index}", "status": "completed",
                "call_id": call_id(index), "name": tool,
                "arguments": json.dumps(shell_arguments(tool, step.command))}
    return {"type": "message", "id": f"msg_standin_{index if index >= 0 else 'summary'}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.text, "annotations": []}]}


def sse_events(response_id: str, item: dict[str, Any],
               input_tokens: int = 10) -> Iterator[dict[str, Any]]:
    """The event stream of one response that carries `item`."""
    yield {"type": "response.created", "response": {"id": response_id, "status": "in_progress"}}
    added = {**item, "status": "in_progress"}
    if item["type"] == "message":
        added["content"] = []
    elif item["type"] == "function_call":
        added["arguments"] = ""
    elif item["type"] == "custom_tool_call":
        added["input"] = ""
    yield {"type": "response.output_item.added", "output_index": 0, "item": added}
    if item["type"] == "message":
        yield {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
               "content_index": 0, "delta": item["content"][0]["text"]}
    yield {"type": "response.output_item.done", "output_index": 0, "item": item}
    usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": input_tokens + 5}
    yield {"type": "response.completed",
           "response": {"id": response_id, "status": "completed", "output": [item],
                        "usage": usage}}


class _Handler(BaseHTTPRequestHandler):
    owner: Standin
    server_version = "responses-standin/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass  # the test inspects `requests`; stderr stays quiet

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        self._record(None)
        if self.path.split("?", 1)[0].endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, _error("not_found", f"no {self.path} in the stand-in"))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._record(None)
            self._json(400, _error("invalid_request_error", "body is not JSON"))
            return
        request = self._record(body)
        if not request.is_turn:
            self._json(404, _error("not_found", f"no {self.path} in the stand-in"))
            return
        index, step = self.owner.next_step(request)
        if self.owner.before_reply is not None:
            self.owner.before_reply(index)
        try:
            item = output_item(request, index, step)
        except LookupError as e:
            self._json(400, _error("invalid_request_error", str(e)))
            return
        n = len(self.owner.turns())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        tokens = FULL_CONTEXT_TOKENS if index in self.owner.full_context_at else 10
        for event in sse_events(f"resp_standin_{n}", item, tokens):
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

    def _record(self, body: Any) -> Recorded:
        request = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                           body)
        self.owner.record(request)
        return request

    def _json(self, status: int, value: dict[str, Any]) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _error(kind: str, text: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": text}}


Standin.handler = _Handler
Standin.thread_name = "responses-standin"

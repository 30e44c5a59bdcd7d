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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests.realclients import local_server
from tests.realclients.local_server import JsonHandler, LocalServer, Say, step_index

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


Step = Shell | Patch | Say


@dataclass(frozen=True)
class Recorded(local_server.Recorded):
    """One HTTP request Codex made."""

    @property
    def is_turn(self) -> bool:
        return self.route.endswith("/responses") and isinstance(self.body, dict)

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

    @property
    def base_url(self) -> str:
        return self.address + "/v1"

    def turns(self) -> list[Recorded]:
        return self.recorded(lambda r: r.is_turn)

    def next_step(self, request: Recorded) -> tuple[int, Step]:
        """The step this request is answered with (see the module docstring)."""
        answered = request.answered()
        if not request.is_agent_loop:
            return -1, Say(f"{COMPACT_SUMMARY} [standin done: {' '.join(sorted(answered))}]")
        index = step_index(self.script, answered, call_id)
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


class _Handler(JsonHandler):
    owner: Standin
    server_version = "responses-standin/1"
    record_type = Recorded

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        request = self._record(None)
        if request.route.endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, self.error("not_found", f"no {self.path} in the stand-in"))

    def do_POST(self) -> None:  # noqa: N802
        request = self._read()
        if request is None:
            return
        assert isinstance(request, Recorded)
        if not request.is_turn:
            self._json(404, self.error("not_found", f"no {self.path} in the stand-in"))
            return
        index, step = self.owner.next_step(request)
        if self.owner.before_reply is not None:
            self.owner.before_reply(index)
        try:
            item = output_item(request, index, step)
        except LookupError as e:
            self._json(400, self.error("invalid_request_error", str(e)))
            return
        n = len(self.owner.turns())
        self._start_events()
        tokens = FULL_CONTEXT_TOKENS if index in self.owner.full_context_at else 10
        for event in sse_events(f"resp_standin_{n}", item, tokens):
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()



Standin.handler = _Handler
Standin.thread_name = "responses-standin"

"""The requests the bridge answers without the SDK: the opening exchange and the tools.

Stdlib only. A client is ready when its first `tools/list` is answered, and every client
sends one at once; waiting for the SDK import (~0.65 s idle, seconds on a loaded machine)
made that ~1 s. So `initialize`, `server/discover`, `ping` (2025 era), `tools/list` and
`tools/call` are answered here, in both protocol eras, whether or not the SDK has loaded;
anything else (unknown methods, a malformed envelope, a request the era forbids) goes to
the SDK,
which is the judge of everything this module does not recognise as plainly well-formed.

Rules that keep the two answerers from ever contradicting each other:

- The era is decided by the connection's first request, with the SDK's own rule
  (handshake.era), and that request is always replayed to the SDK so the SDK locks the
  same era. After a `server/discover` opening, a late `initialize` is refused here with
  the SDK's own -32022 (clients answer it with a re-probe; waiting for the SDK to say it
  made a client whose bridge read late wait seconds more); after an `initialize` opening,
  a late enveloped `server/discover` is the SDK's to refuse (-32600, clients fall back).
- A 2025-era request is answered here only after `initialize` was answered here.
- Every answer is exactly the SDK's (test_server.py compares them request by request);
  server.py builds its tool list and tool results from this module's functions.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_bridge import handshake, toolspec

log = logging.getLogger("mcp_bridge")
INVALID_PARAMS = -32602
_LIST_KEYS = frozenset({"cursor", "_meta"})
_CALL_KEYS = frozenset({"name", "arguments", "_meta"})


def tool_list() -> list[dict[str, Any]]:
    """The tools as MCP `Tool` objects (JSON)."""
    return [{"name": name, "description": spec["description"],
             "inputSchema": spec["inputSchema"], "annotations": spec["annotations"]}
            for name, spec in toolspec.TOOLS.items()]


class BadCall(Exception):
    """A tools/call the protocol refuses (-32602): unknown tool, bad arguments."""


def call_result(bridge: Any, name: str, arguments: Any) -> dict[str, Any]:
    """Run one tool and shape its MCP `CallToolResult` (JSON).

    A refusal the model can fix, or an unexpected failure, is a result with isError true;
    an unknown tool or wrongly typed arguments raise BadCall.
    """
    from mcp_bridge import tools  # the tools and their cache readers load on first call

    try:
        arguments = toolspec.check_arguments(name, arguments)
    except toolspec.BadArguments as e:
        raise BadCall(f"Invalid params: {e}") from e
    try:
        result = bridge.call(name, arguments)
    except tools.Rejected as e:
        return _error_result(str(e))
    except Exception:
        log.exception("tool %s failed", name)
        return _error_result(f"{name} failed inside the bridge; details are in its stderr log")
    return {"content": [{"type": "text", "text": json.dumps(result, ensure_ascii=False)}],
            "structuredContent": result, "isError": False}


def _error_result(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


@dataclass(frozen=True)
class Answer:
    """What the fast path does with one request.

    `result` is sent at once; `call` (a tool to run, off the event loop) produces the
    result or a BadCall; `error` is sent at once as the request's error; `replay` also
    hands the request to the SDK, whose answer is then dropped (the opening request, and
    every `initialize` answered with a result, which the SDK must see).
    """

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    call: Callable[[], dict[str, Any]] | None = None
    replay: bool = False


def _ping(params: dict[str, Any]) -> Answer | None:
    """`ping` (2025 era; the 2026 era has none, and the SDK says so) needs nothing but an
    empty result: a client that probes with it right after spawning must not wait for
    the SDK import. Anything but a plain ping is the SDK's."""
    if not set(params) <= {"_meta"} or not isinstance(params.get("_meta", {}), dict):
        return None
    return Answer(result={})


class FastPath:
    def __init__(self, bridge: Callable[[], Any]) -> None:
        self._bridge_factory = bridge
        self._bridge: Any = None
        self._lock = threading.Lock()
        self.era: str | None = None
        self.initialized = False  # 2025 era: an initialize was answered here

    def bridge(self) -> Any:
        """The tools' Bridge, made on first use (the tool thread or the SDK may ask first)."""
        with self._lock:
            if self._bridge is None:
                self._bridge = self._bridge_factory()
            return self._bridge

    def answer(self, frame: dict[str, Any]) -> Answer | None:
        """The fast answer to one request (it has an id), or None: the SDK answers."""
        opening = self.era is None
        if opening:
            self.era = handshake.era(frame)
        method, params = frame["method"], frame.get("params") or {}
        if self.era == handshake.LEGACY:
            answer = self._legacy(method, params, opening)
        else:
            answer = self._modern(method, params, opening)
        if answer is not None and opening and not answer.replay:
            answer = Answer(answer.result, answer.error, answer.call, replay=True)
        return answer

    def _legacy(self, method: str, params: dict[str, Any], opening: bool) -> Answer | None:
        if method == "ping":
            return _ping(params)
        if method == "initialize":
            result = handshake.fast_initialize(params)
            if result is None:
                return None
            self.initialized = True
            return Answer(result=result, replay=True)
        if not self.initialized or handshake.has_envelope(params):
            return None
        return self._tools(method, params, opening, modern=False)

    def _modern(self, method: str, params: dict[str, Any], opening: bool) -> Answer | None:
        if method == "initialize":  # never the opening: that would have made the era legacy
            plain = isinstance(params, dict)
            return Answer(error=handshake.initialize_refusal(params)) if plain else None
        if not handshake.envelope_ok(params):
            return None
        if method == "server/discover":
            return Answer(result=handshake.discover())
        return self._tools(method, params, opening, modern=True)

    def _tools(self, method: str, params: dict[str, Any], opening: bool, *,
               modern: bool) -> Answer | None:
        if not isinstance(params.get("_meta", {}), dict):
            return None
        if method == "tools/list" and set(params) <= _LIST_KEYS and \
                isinstance(params.get("cursor", ""), str):
            listing = {"tools": tool_list()}
            return Answer(result=handshake.modern(listing, cacheable=True) if modern else listing)
        # A tool call runs once: as the opening request it must go to the SDK, which
        # needs to see it to lock the era.
        if method == "tools/call" and not opening and set(params) <= _CALL_KEYS and \
                isinstance(params.get("name"), str) and \
                isinstance(params.get("arguments", {}), dict | None):
            name, arguments = params["name"], params.get("arguments")

            def run() -> dict[str, Any]:
                result = call_result(self.bridge(), name, arguments)
                return handshake.modern(result) if modern else result

            return Answer(call=run)
        return None

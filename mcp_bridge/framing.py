"""classify(): what to do with one stdin line, before any SDK sees it.

The SDK's stdio transport silently drops lines it cannot validate, so a client waiting on
a malformed request hangs. Here every line gets exactly the JSON-RPC treatment of the
protocol error table in docs/bridge.md: an error frame, silence (notifications, stray
responses, blank lines), or a cleaned frame to forward. Batches (JSON arrays) were removed
from MCP in 2025-06-18 and are answered with one -32600 for the whole array. Stdlib only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mcp_bridge.contract.events import MAX_JSON_DEPTH, json_depth_problem

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
MAX_LINE_BYTES = 4 * 1024 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Verdict:
    action: str  # "reply" | "drop" | "forward"
    frame: dict[str, Any] | None = None


DROP = Verdict("drop")


def error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def reply(id_: Any, code: int, message: str) -> Verdict:
    return Verdict("reply", error(id_, code, message))


def oversized() -> Verdict:
    return reply(None, INVALID_REQUEST, f"Invalid Request: line exceeds {MAX_LINE_BYTES} bytes")


def valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def classify(line: bytes) -> Verdict:
    """Decide one line's fate: reply with an error, drop silently, or forward."""
    if not line.strip():
        return DROP  # blank lines between frames are tolerated, never answered
    if too_deep(line):
        return reply(None, PARSE_ERROR, f"Parse error: JSON nested deeper than "
                                        f"{MAX_JSON_DEPTH} levels is not parsed")
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        return reply(None, PARSE_ERROR, "Parse error: the line is not valid UTF-8")
    except (ValueError, RecursionError):
        return reply(None, PARSE_ERROR, "Parse error: the line is not valid JSON")
    if isinstance(value, list):
        return reply(None, INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not "
                                            "supported (removed in MCP 2025-06-18)")
    if not isinstance(value, dict):
        return reply(None, INVALID_REQUEST, "Invalid Request: a frame must be a JSON object")
    return _classify_object(replace_surrogates(value))


def too_deep(line: bytes) -> bool:
    """Nested deeper than MAX_JSON_DEPTH (the one limit every front door applies)?

    Refused before parsing, so no recursion and no allocation per level. Fewer brackets
    than the limit cannot nest deeper (counted in C); only then is the line scanned.
    """
    if line.count(b"[") + line.count(b"{") <= MAX_JSON_DEPTH:
        return False
    return json_depth_problem(line) is not None


def _classify_object(frame: dict[str, Any]) -> Verdict:
    has_id = "id" in frame
    id_ = frame.get("id") if valid_id(frame.get("id")) else None
    if "method" not in frame:
        if "result" in frame or "error" in frame or not has_id:
            return DROP  # a stray response, or an empty notification: not addressed to us
        return reply(id_, INVALID_REQUEST, "Invalid Request: no method")
    if not has_id:
        # A notification: never answered, whatever is wrong with it.
        ok = isinstance(frame["method"], str) and frame.get("jsonrpc") == "2.0" and \
            isinstance(frame.get("params") or {}, dict)
        return Verdict("forward", frame) if ok else DROP
    if not valid_id(frame["id"]):
        return reply(None, INVALID_REQUEST, "Invalid Request: id must be a string or integer")
    if frame.get("jsonrpc") != "2.0":
        return reply(id_, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
    if not isinstance(frame["method"], str) or not frame["method"]:
        return reply(id_, INVALID_REQUEST, "Invalid Request: method must be a string")
    if frame.get("params") is None:
        frame.pop("params", None)  # "params": null means no params
    elif not isinstance(frame["params"], dict):
        return reply(id_, INVALID_PARAMS, "Invalid params: params must be an object")
    return Verdict("forward", frame)


def replace_surrogates(value: Any) -> Any:
    """Lone surrogates (legal in JSON escapes, unencodable in UTF-8) become U+FFFD.

    The SDK drops a request holding one without answering; replacing keeps the request
    answerable and the output encodable.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {replace_surrogates(k): replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_surrogates(v) for v in value]
    return value


def encode(frame: dict[str, Any]) -> bytes:
    """One frame, one line; never a raw newline or an unencodable character inside."""
    text = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "replace") + b"\n"

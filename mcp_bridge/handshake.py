"""The protocol answers computable without importing the SDK: handshake, discover, era.

Importing the `mcp` package costs ~0.65 s here (pydantic models for every protocol
revision), more than the whole 300 ms ready budget. So the transport answers the opening
exchange from this module while the SDK loads in a thread (fastpath.py). Every answer
here must be exactly the SDK's, or a client would be told one thing now and another by
the SDK later: test_server.py pins each one to the installed SDK (versions, meta keys,
negotiation, the whole results).

Protocol eras. A 2025-style client opens with `initialize`; a 2026-07-28 client sends
every request with a `_meta` envelope (protocol version, client capabilities) and opens
with `server/discover`. The SDK locks a connection to one era on its *first request*
(mcp.server.runner.serve_dual_era_loop) and refuses the other era afterwards. `era()`
is that rule, so the transport decides exactly as the SDK will.
"""

from __future__ import annotations

from typing import Any

from mcp_bridge import __version__

SERVER_NAME = "ctxlake"
SERVER_VERSION = __version__
INSTRUCTIONS = (
    "ctxlake: coordination and shared memory for this agent fleet. Read tools answer from a "
    "local cache rendered by the ctxlake workers (it may lag); write tools only queue a "
    "request for sync. memory_search results are other sessions' observations: verify "
    "them before relying on them."
)
#: Mirrors mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS of the pinned SDK.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]
#: Mirrors mcp_types.version.MODERN_PROTOCOL_VERSIONS (per-request envelope revisions).
MODERN_VERSIONS = ("2026-07-28",)
#: The envelope keys (mcp_types' *_META_KEY constants).
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
CAPABILITIES = {"tools": {"listChanged": False}}
SERVER_INFO = {"name": SERVER_NAME, "version": SERVER_VERSION}

LEGACY, MODERN = "legacy", "modern"
#: mcp_types.jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, and the SDK's words for an `initialize`
#: on a connection locked to the 2026 era (mcp.server.runner._serve_modern_stream).
UNSUPPORTED_PROTOCOL_VERSION = -32022
INITIALIZE_ON_MODERN = ("connection is serving the 2026-07-28 protocol; the initialize "
                        "handshake is not accepted")


def negotiate(requested: str) -> str:
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


def has_envelope(params: Any) -> bool:
    """The SDK's `_has_modern_envelope`: `_meta` carries the protocol-version key."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def era(opening: dict[str, Any]) -> str:
    """The era the SDK locks a connection to, given the connection's first request."""
    modern = opening.get("method") != "initialize" and has_envelope(opening.get("params"))
    return MODERN if modern else LEGACY


_INFO_KEYS = frozenset({"name", "version", "title", "description", "websiteUrl"})


def _is_info(value: Any) -> bool:
    """A client Implementation the SDK surely accepts: name and version, plus only its other
    string fields (anything else, `icons` say, is left for the SDK to judge)."""
    return isinstance(value, dict) and {"name", "version"} <= set(value) <= _INFO_KEYS and \
        all(isinstance(v, str) for v in value.values())


def _plain_capabilities(value: Any) -> bool:
    """Capabilities the SDK surely accepts: objects of objects/booleans (anything odder
    is left for the SDK to judge)."""
    return isinstance(value, dict) and all(
        isinstance(v, dict) and all(isinstance(x, bool | dict) for x in v.values())
        for v in value.values())


def fast_initialize(params: Any) -> dict[str, Any] | None:
    """The `initialize` result, or None when the SDK should judge these params itself."""
    if not isinstance(params, dict):
        return None
    version = params.get("protocolVersion")
    if not (isinstance(version, str) and _plain_capabilities(params.get("capabilities"))
            and _is_info(params.get("clientInfo"))):
        return None
    return {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": negotiate(version),
        "serverInfo": dict(SERVER_INFO),
    }


def envelope_ok(params: Any) -> bool:
    """A 2026-era envelope the SDK accepts as is (else the SDK judges and answers)."""
    if not has_envelope(params):
        return False
    meta = params["_meta"]
    return (meta[PROTOCOL_VERSION_KEY] in MODERN_VERSIONS
            and _plain_capabilities(meta.get(CLIENT_CAPABILITIES_KEY))
            and (CLIENT_INFO_KEY not in meta or _is_info(meta[CLIENT_INFO_KEY])))


def modern(result: dict[str, Any], *, cacheable: bool = False) -> dict[str, Any]:
    """A 2026-era result: the SDK stamps the server identity and the result type on each,
    and a cache hint on the list-like ones."""
    out = {**result, "resultType": "complete",
           "_meta": {SERVER_INFO_KEY: dict(SERVER_INFO)}}
    if cacheable:
        out.update(cacheScope="private", ttlMs=0)
    return out


def discover() -> dict[str, Any]:
    """The `server/discover` result (2026 era)."""
    return modern({"capabilities": CAPABILITIES, "instructions": INSTRUCTIONS,
                   "supportedVersions": list(MODERN_VERSIONS)}, cacheable=True)


def initialize_refusal(params: dict[str, Any]) -> dict[str, Any]:
    """The SDK's error for an `initialize` on a 2026-era connection (Claude Code's fallback
    when its `server/discover` went unanswered for 3 s): answered here so that a client
    whose bridge started reading late is not also kept waiting for the SDK import. The
    data is the SDK's `_initialize_after_modern_data`."""
    requested = params.get("protocolVersion")
    data: dict[str, Any] = {"supported": list(MODERN_VERSIONS)}
    if isinstance(requested, str):
        data["requested"] = requested
    return {"code": UNSUPPORTED_PROTOCOL_VERSION, "message": INITIALIZE_ON_MODERN, "data": data}

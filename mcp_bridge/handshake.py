"""The `initialize` answer, computable without importing the SDK.

Importing the `mcp` package costs ~0.65 s here (pydantic models for every protocol
revision), more than the whole 500 ms cold-start budget. So the transport answers the
first `initialize` from this module while the SDK loads in a thread, then replays that
request to the SDK and drops the SDK's (identical) answer. test_handshake.py pins this
module to the installed SDK: versions, negotiation and the whole result must match.
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
CAPABILITIES = {"tools": {"listChanged": False}}


def negotiate(requested: str) -> str:
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


def fast_initialize(params: Any) -> dict[str, Any] | None:
    """The `initialize` result, or None when the SDK should judge these params itself."""
    if not isinstance(params, dict):
        return None
    version, caps, info = params.get("protocolVersion"), params.get("capabilities"), \
        params.get("clientInfo")
    if not (isinstance(version, str) and isinstance(caps, dict) and isinstance(info, dict)
            and isinstance(info.get("name"), str) and isinstance(info.get("version"), str)):
        return None
    return {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": negotiate(version),
        "serverInfo": {"name": SERVER_NAME, "version": SERVER_VERSION},
    }

"""In-memory SDK client tests: what a real MCP client sees of the tool surface."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from mcp_bridge import handshake, server, tools, toolspec
from mcp_bridge.config import Config

EXPECTED = {
    "fleet_status": ([], []),
    "fleet_claim": (["paths", "reason", "ttl_secs"], ["paths", "reason"]),
    "fleet_release": (["paths"], []),
    "fleet_history": (["repo", "since", "limit"], []),
    "fleet_handoff": (["summary", "status", "next", "transfer_leases"], ["summary", "status"]),
    "fleet_pickup": (["handoff", "version", "confirm"], ["handoff"]),
    "fleet_clear": (["handoff", "version"], ["handoff"]),
    "memory_search": (["query", "scope", "subject", "claim_type", "k"], ["query"]),
    "memory_propose": (["claim", "type", "subject", "evidence"],
                       ["claim", "type", "subject", "evidence"]),
    "memory_timeline": (["subject", "since", "limit"], ["subject"]),
    "memory_feedback": (["claim", "verdict", "note"], ["claim", "verdict"]),
}
READ_ONLY = {"fleet_status", "fleet_history", "memory_search", "memory_timeline"}


def run(bridge: tools.Bridge, body: Any, mode: str = "legacy") -> Any:
    """Run body(client) against an in-process server; an MCPError is re-raised bare."""
    async def main() -> Any:
        async with Client(server.build_server(bridge), mode=mode) as client:
            try:
                return await body(client)
            except MCPError as e:
                return e
    result = asyncio.run(main())
    if isinstance(result, MCPError):
        raise result
    return result


def test_it_lists_exactly_its_tools_with_their_arguments(bridge: tools.Bridge) -> None:
    listed = run(bridge, lambda c: c.list_tools()).tools
    assert {t.name: (list(t.input_schema["properties"]), t.input_schema["required"])
            for t in listed} == EXPECTED
    for tool in listed:
        assert tool.description and "\n" not in tool.description
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert tool.annotations.read_only_hint is (tool.name in READ_ONLY)
        assert tool.annotations.open_world_hint is False


def test_it_offers_no_tool_that_writes_or_promotes_a_claim(bridge: tools.Bridge) -> None:
    names = {t.name for t in run(bridge, lambda c: c.list_tools()).tools}
    assert not {n for n in names if "write" in n or "promote" in n}
    assert names == set(toolspec.TOOLS) == set(tools.HANDLERS)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_it_returns_structured_results(live: Config, bridge: tools.Bridge, mode: str) -> None:
    result = run(bridge, lambda c: c.call_tool("memory_search", {"query": "stripe webhooks"}),
                 mode=mode)
    assert result.is_error is False
    assert json.loads(result.content[0].text) == result.structured_content
    assert result.structured_content["results"][0]["id"] == "cc-02"


def test_it_surfaces_refusals_as_is_error_results(bridge: tools.Bridge) -> None:
    result = run(bridge, lambda c: c.call_tool(
        "memory_propose", {"claim": "c", "type": "fact", "subject": "s", "evidence": []}))
    assert result.is_error is True and "No evidence, no claim" in result.content[0].text


@pytest.mark.parametrize(("name", "arguments", "message"), [
    ("memory_write", {}, "Unknown tool"),
    ("fleet_claim", {"paths": ["a"]}, "missing required argument(s): reason"),
    ("fleet_claim", {"paths": "a", "reason": "r"}, "fleet_claim.paths must be a JSON array"),
    ("fleet_claim", {"paths": [1], "reason": "r"}, "paths[0] must be a JSON string"),
    ("fleet_history", {"limit": "5"}, "must be a JSON integer"),
    ("fleet_history", {"limit": True}, "must be a JSON integer, got boolean"),
    ("fleet_status", {"verbose": True}, "unknown argument"),
    ("memory_search", {"query": None}, "got null"),
])
def test_it_answers_bad_calls_with_invalid_params(bridge: tools.Bridge, name: str,
                                                  arguments: dict, message: str) -> None:
    with pytest.raises(MCPError) as info:
        run(bridge, lambda c: c.call_tool(name, arguments))
    assert info.value.code == -32602 and message in info.value.message


def test_it_hides_internal_failures_behind_a_generic_error(bridge: tools.Bridge,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    def boom(b: tools.Bridge) -> None:
        raise RuntimeError("/secret/path exploded")

    monkeypatch.setitem(tools.HANDLERS, "fleet_status", boom)
    result = run(bridge, lambda c: c.call_tool("fleet_status", {}))
    assert result.is_error and "/secret/path" not in result.content[0].text


@pytest.mark.filterwarnings("ignore:ping is removed")
def test_it_answers_ping(bridge: tools.Bridge) -> None:
    assert isinstance(run(bridge, lambda c: c.send_ping()), types.EmptyResult)


def sdk_initialize(bridge: tools.Bridge, params: dict[str, Any]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []

    async def main() -> None:
        backend = server.SdkBackend(server.build_server(bridge), out.append)
        await backend.start()
        await backend.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        for _ in range(200):
            if out:
                break
            await asyncio.sleep(0.01)
        await backend.close()

    asyncio.run(main())
    return out[0]["result"]


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25",
                                     "1999-01-01", "2026-07-28"])
def test_it_answers_the_fast_initialize_exactly_as_the_sdk_would(bridge: tools.Bridge,
                                                                 version: str) -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    params = {"protocolVersion": version, "capabilities": {},
              "clientInfo": {"name": "t", "version": "1"}}
    assert handshake.HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    assert handshake.fast_initialize(params) == sdk_initialize(bridge, params)


# -- the fast path answers exactly as the SDK would --------------------------------------

ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
LEGACY_INIT = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
               "clientInfo": {"name": "t", "version": "1"}}
CALLS = [
    {"name": "fleet_status", "arguments": {}},
    {"name": "fleet_status"},
    {"name": "memory_search", "arguments": {"query": "stripe webhooks"}},
    {"name": "memory_propose", "arguments": {"claim": "c", "type": "fact", "subject": "s",
                                             "evidence": []}},
    {"name": "memory_write", "arguments": {}},
    {"name": "fleet_claim", "arguments": {"paths": "a", "reason": "r"}},
    {"name": "fleet_history", "arguments": {"limit": True}},
    {"name": "fleet_status", "arguments": []},
    {"name": 5, "arguments": {}},
    {"name": "fleet_status", "arguments": {}, "extra": 1},
]
LISTS: list[dict[str, Any]] = [{}, {"cursor": "abc"}, {"cursor": 5},
                               {"_meta": {"progressToken": 1}}, {"_meta": 3}]


def _req(id_: int, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        frame["params"] = params
    return frame


PINGS: list[dict[str, Any] | None] = [None, {}, {"_meta": {"progressToken": 2}},
                                      {"_meta": 3}, {"extra": 1}]


def legacy_session(version: str = "2025-06-18", *, ping_first: bool = False,
                   ) -> list[dict[str, Any]]:
    frames = [_req(0, "ping", None)] if ping_first else []
    frames += [_req(1, "initialize", {**LEGACY_INIT, "protocolVersion": version}),
               {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    frames += [_req(60 + i, "ping", p) for i, p in enumerate(PINGS)]
    frames += [_req(10 + i, "tools/list", p or None) for i, p in enumerate(LISTS)]
    frames += [_req(20 + i, "tools/call", p) for i, p in enumerate(CALLS)]
    frames += [_req(40, "tools/list", {"_meta": ENVELOPE}),
               _req(41, "server/discover", {"_meta": ENVELOPE}),
               _req(42, "initialize", {**LEGACY_INIT, "protocolVersion": "2024-11-05"}),
               _req(43, "initialize", {**LEGACY_INIT, "capabilities": {"roots": 5}}),
               _req(44, "initialize", {**LEGACY_INIT, "clientInfo": {
                   "name": "t", "version": "1", "icons": "bad"}}),
               _req(45, "initialize", {**LEGACY_INIT, "clientInfo": {
                   "name": "t", "version": "1", "title": "T", "websiteUrl": "https://x.y"}})]
    return frames


def modern_session(opening: str = "server/discover") -> list[dict[str, Any]]:
    env = {"_meta": ENVELOPE}
    frames = [_req(1, opening, env), _req(2, "server/discover", env)]
    frames += [_req(60 + i, "ping", {**(p or {}), **env}) for i, p in enumerate(PINGS)
               if not (p or {}).get("_meta")]
    frames += [_req(10 + i, "tools/list", {**p, "_meta": ENVELOPE}) for i, p in enumerate(LISTS)
               if "_meta" not in p]
    frames += [_req(20 + i, "tools/call", {**p, **env}) for i, p in enumerate(CALLS)]
    odd = [{**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2025-11-25"},
           {k: v for k, v in ENVELOPE.items() if "Capabilities" not in k},
           {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": {"roots": 5}},
           {**ENVELOPE, "io.modelcontextprotocol/clientInfo": "me"}]
    frames += [_req(40 + i, "tools/list", {"_meta": m}) for i, m in enumerate(odd)]
    frames += [_req(50, "tools/list", None), _req(51, "initialize", LEGACY_INIT),
               _req(52, "initialize", {**LEGACY_INIT, "protocolVersion": 7})]
    return frames


def sdk_answers(bridge: tools.Bridge, frames: list[dict[str, Any]]) -> dict[Any, Any]:
    """Each request's answer from the SDK alone (what the bridge said before the fast path)."""
    out: list[dict[str, Any]] = []

    async def main() -> None:
        backend = server.SdkBackend(server.build_server(bridge), out.append)
        await backend.start()
        for frame in frames:
            await backend.send(frame)
            if "id" in frame:
                for _ in range(500):
                    if any(o.get("id") == frame["id"] for o in out):
                        break
                    await asyncio.sleep(0.01)
        await backend.close()

    asyncio.run(main())
    return {o["id"]: o for o in out}


def fast_answers(bridge: tools.Bridge, frames: list[dict[str, Any]]) -> dict[Any, Any]:
    """The fast path's answers, for the requests it answers itself."""
    from mcp_bridge.fastpath import BadCall, FastPath

    fast, out = FastPath(lambda: bridge), {}
    for frame in frames:
        if "id" not in frame:
            continue
        answer = fast.answer(frame)
        if answer is None:
            continue
        if answer.error is not None:
            out[frame["id"]] = {"jsonrpc": "2.0", "id": frame["id"], "error": answer.error}
            continue
        try:
            result = answer.result if answer.call is None else answer.call()
            out[frame["id"]] = {"jsonrpc": "2.0", "id": frame["id"], "result": result}
        except BadCall as e:
            out[frame["id"]] = {"jsonrpc": "2.0", "id": frame["id"],
                                "error": {"code": -32602, "message": str(e)}}
    return out


@pytest.mark.parametrize("frames", [
    *[legacy_session(v) for v in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25",
                                  "1999-01-01")],
    modern_session("server/discover"), modern_session("tools/list"),
    legacy_session(ping_first=True), modern_session("ping")],
    ids=["legacy-2024-11-05", "legacy-2025-03-26", "legacy-2025-06-18", "legacy-2025-11-25",
         "legacy-unknown", "modern-discover", "modern-tools-list", "legacy-ping-first",
         "modern-ping-first"])
def test_the_fast_path_answers_exactly_as_the_sdk_would(live: Config, bridge: tools.Bridge,
                                                         frames: list[dict[str, Any]]) -> None:
    import time_machine

    # fleet_status says how old the cache is: both answers are made at one frozen moment
    with time_machine.travel(time.time(), tick=False):
        sdk, fast = sdk_answers(bridge, frames), fast_answers(bridge, frames)
    # it does answer: the opening (but a 2026-era ping, which that era does not have: the
    # SDK refuses it), the lists and the calls
    modern = handshake.era(frames[0]) == handshake.MODERN
    must = {1, 2, 10, 22, 51, 52} if modern else {1, 10, 20}
    if modern and frames[0]["method"] == "ping":
        must.discard(1)
    assert must <= set(fast)
    if frames[0]["method"] == "ping" and not modern:
        assert 0 in fast  # a ping as the very first frame needs no SDK
    for id_, answer in fast.items():
        assert answer == sdk[id_], id_


def test_the_fast_path_constants_are_the_sdks() -> None:
    import mcp_types
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    assert handshake.MODERN_VERSIONS == MODERN_PROTOCOL_VERSIONS
    assert handshake.PROTOCOL_VERSION_KEY == mcp_types.PROTOCOL_VERSION_META_KEY
    assert handshake.CLIENT_INFO_KEY == mcp_types.CLIENT_INFO_META_KEY
    assert handshake.CLIENT_CAPABILITIES_KEY == mcp_types.CLIENT_CAPABILITIES_META_KEY
    assert handshake.SERVER_INFO_KEY == mcp_types.SERVER_INFO_META_KEY

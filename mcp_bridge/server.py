"""The only module that imports the `mcp` SDK: the low-level Server and its backend.

The low-level Server (not MCPServer) because the bridge owns its tool schemas
(toolspec.py) and must answer an unknown tool or a bad argument with -32602; MCPServer
derives schemas from signatures and turns both into isError results. Tools are plain
functions (tools.py); this file only translates between them and MCP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcp_bridge import fastpath, framing, handshake, tools
from mcp_bridge.config import Config
from mcp_bridge.transport import Emit

log = logging.getLogger("mcp_bridge")


def tool_list() -> list[types.Tool]:
    return [types.Tool.model_validate(tool) for tool in fastpath.tool_list()]


def build_server(bridge: tools.Bridge | Callable[[], tools.Bridge]) -> Server[Any]:
    """The SDK server; `bridge` may be a factory, called on the first tool call."""
    listing = types.ListToolsResult(tools=tool_list())
    get_bridge = bridge if callable(bridge) else lambda: bridge

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listing

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return call(get_bridge(), params.name, params.arguments)

    return Server(handshake.SERVER_NAME, version=handshake.SERVER_VERSION,
                  instructions=handshake.INSTRUCTIONS, on_list_tools=on_list_tools,
                  on_call_tool=on_call_tool)


def call(bridge: tools.Bridge, name: str, arguments: Any) -> types.CallToolResult:
    """Run one tool (fastpath.call_result: the one definition of a tool's MCP result)."""
    try:
        return types.CallToolResult.model_validate(fastpath.call_result(bridge, name, arguments))
    except fastpath.BadCall as e:
        raise MCPError(framing.INVALID_PARAMS, str(e)) from e


class SdkBackend:
    """Feeds classified frames to the SDK server over memory streams."""

    def __init__(self, server: Server[Any], emit: Emit) -> None:
        self.server, self.emit = server, emit
        self.to_sdk, self.sdk_in = anyio.create_memory_object_stream[SessionMessage | Exception](
            256)
        self.sdk_out, self.from_sdk = anyio.create_memory_object_stream[SessionMessage](256)
        self._done = anyio.Event()

    async def start(self) -> None:
        import asyncio

        self._tasks = [asyncio.create_task(self._serve()), asyncio.create_task(self._pump())]

    async def _serve(self) -> None:
        try:
            await self.server.run(self.sdk_in, self.sdk_out,
                                  self.server.create_initialization_options())
        except Exception:
            log.exception("the MCP server loop stopped")
        finally:
            await self.sdk_out.aclose()

    async def _pump(self) -> None:
        async with self.from_sdk:
            async for message in self.from_sdk:
                self.emit(message.message.model_dump(by_alias=True, exclude_unset=True,
                                                     mode="json"))
        self._done.set()

    async def send(self, frame: dict[str, Any]) -> None:
        try:
            message = types.jsonrpc_message_adapter.validate_python(frame, by_name=False)
        except ValidationError:
            if "id" in frame:  # a request the SDK cannot even parse: answer, never hang
                self.emit(framing.error(frame["id"], framing.INVALID_REQUEST,
                                        "Invalid Request: not a valid JSON-RPC message"))
            return
        await self.to_sdk.send(SessionMessage(message))

    async def close(self) -> None:
        await self.to_sdk.aclose()
        with anyio.move_on_after(5):
            await self._done.wait()


async def load(emit: Emit, bridge: Callable[[], tools.Bridge] | None = None) -> SdkBackend:
    if bridge is None:
        cfg = Config.from_env()
        bridge = lambda: tools.Bridge.from_config(cfg)  # noqa: E731
    backend = SdkBackend(build_server(bridge), emit)
    await backend.start()
    return backend

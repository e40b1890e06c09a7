"""CRANE's MCP server: the tools of `crane.mcp.tools` (and two resources) on the SDK's low-level `Server`, over
stdio or streamable HTTP on the loopback interface with a bearer token.

Handlers (MCP methods):
- `tools/list`: the tool table, schemas generated from the msgspec Structs;
- `tools/call`: arguments decoded strictly (a bad argument or an unknown tool: an MCP error, invalid params);
  the work runs in a worker thread (one kernel conversation at a time), so pings and lists are answered while
  a sandbox run goes on; a tool that cannot do its work (dead kernel, unreadable notebook) answers a result
  with `isError` and the reason; an unexpected exception too — the server never dies from one call;
- `resources/list`, `resources/read`: `crane://kernel/facts` (every user variable's facts) and, with a
  notebook, `crane://notebook/cells`.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

import anyio
import msgspec
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)

from crane import __version__
from crane.errors import CraneError
from crane.mcp.backend import KernelTools, ToolFailure
from crane.mcp.schemas import FactsArgs
from crane.mcp.tools import BY_NAME, TOOLS, ArgumentError, decode_args, encode_result, object_schema

log = logging.getLogger(__name__)

FACTS_URI = "crane://kernel/facts"
CELLS_URI = "crane://notebook/cells"
INSTRUCTIONS = (
    "CRANE knows the user's live Jupyter kernel. Read its state with crane_kernel_facts instead of running code "
    "in the kernel; check code with crane_check_code / crane_check_cell and test it with crane_try_code (a "
    "confined copy of the kernel) before proposing it; crane_fixes gives verified repairs of a crashing cell. No "
    "tool runs anything in the user's kernel."
)


def _tool_list() -> list[Tool]:
    return [
        Tool(name=t.name, title=t.title, description=t.description, input_schema=object_schema(t.args),
             output_schema=object_schema(t.result),
             annotations=ToolAnnotations(read_only_hint=t.read_only, destructive_hint=False, open_world_hint=False))
        for t in TOOLS
    ]


def _text_result(payload: dict[str, Any] | str, is_error: bool = False) -> CallToolResult:
    if isinstance(payload, str):
        return CallToolResult(content=[TextContent(type="text", text=payload)], is_error=is_error)
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
                          structured_content=payload, is_error=is_error)


def build_server(tools: KernelTools) -> Server[Any]:
    listed = _tool_list()

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        """MCP `tools/list`."""
        return ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        """MCP `tools/call`."""
        spec = BY_NAME.get(params.name)
        if spec is None:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r} (tools: {', '.join(BY_NAME)})")
        try:
            args = decode_args(spec, params.arguments)
        except ArgumentError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        try:
            result = await anyio.to_thread.run_sync(spec.call, tools, args)
        except (ToolFailure, CraneError) as exc:
            log.info("%s failed: %s", spec.name, exc)
            return _text_result(f"{spec.name}: {exc}", is_error=True)
        except Exception as exc:  # one call never takes the server down
            log.exception("%s raised", spec.name)
            return _text_result(f"{spec.name}: internal error: {type(exc).__name__}: {exc}", is_error=True)
        return _text_result(encode_result(result))

    async def list_resources(ctx: Any, params: PaginatedRequestParams | None) -> ListResourcesResult:
        """MCP `resources/list`."""
        out = [Resource(uri=FACTS_URI, name="kernel-facts", title="The kernel's variables",
                        description="Facts about every user variable of the live kernel (read privately)",
                        mime_type="application/json")]
        if tools.attached.notebook:
            out.append(Resource(uri=CELLS_URI, name="notebook-cells", title="The notebook's cells",
                                description=f"The cells of {tools.attached.notebook}", mime_type="application/json"))
        return ListResourcesResult(resources=out)

    async def read_resource(ctx: Any, params: ReadResourceRequestParams) -> ReadResourceResult:
        """MCP `resources/read`."""
        uri = str(params.uri)
        try:
            if uri == FACTS_URI:
                value: Any = encode_result(await anyio.to_thread.run_sync(tools.facts, FactsArgs()))
            elif uri == CELLS_URI and tools.attached.notebook:
                value = await anyio.to_thread.run_sync(tools.notebook_cells)
            else:
                raise MCPError(INVALID_PARAMS, f"unknown resource {uri!r}")
        except (ToolFailure, CraneError) as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        text = msgspec.json.encode(value).decode("utf-8")
        return ReadResourceResult(contents=[TextResourceContents(uri=uri, text=text, mime_type="application/json")])

    return Server(
        "crane", version=__version__, title="CRANE", instructions=INSTRUCTIONS,
        on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class TokenGate:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <token>` (compared in constant time);
    others get 401 before they reach MCP."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token> (printed by crane mcp)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve_http(server: Server[Any], host: str, port: int, token: str, ready: Any = None) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp behind the token gate. `ready(port)` once listening."""
    import uvicorn

    app = TokenGate(server.streamable_http_app(host=host), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    srv = uvicorn.Server(config)
    if ready is None:
        await srv.serve()
        return
    async with anyio.create_task_group() as tg:
        tg.start_soon(srv.serve)
        while not srv.started:
            await anyio.sleep(0.02)
        bound = port
        for s in getattr(srv, "servers", []):
            for sock in s.sockets:
                bound = sock.getsockname()[1]
        ready(bound)

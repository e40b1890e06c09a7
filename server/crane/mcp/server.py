"""CRANE's MCP server: the tools of `crane.mcp.tools` (and two resources) on the SDK's low-level `Server`, over
stdio or streamable HTTP on the loopback interface with a bearer token.

Handlers (MCP methods):
- `tools/list`: the tool table, schemas generated from the msgspec Structs;
- `tools/call`: arguments decoded strictly (a bad argument: a result with `isError` and the validation message,
  which the model reads; an unknown tool: an MCP error, invalid params); the work runs in a worker thread, so
  pings, lists and the read-only tools (facts, static checks) are answered while a sandbox run or a fix search
  goes on (`crane.mcp.backend` keeps one lock for reads, one for runs); `notifications/cancelled` ends the
  call's sandbox run and its process tree at once; a client that sent a progress token gets a progress
  notification every few seconds; a tool that cannot do its work (no kernel yet, a dead kernel, an unreadable
  notebook) answers a result with `isError` and the reason; an unexpected exception too — the server never
  dies from one call;
- `resources/list`, `resources/read`: `crane://kernel/facts` (every user variable's facts) and, with a
  notebook, `crane://notebook/cells`.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
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


PROGRESS_EVERY_S = 2.0


async def _run_cancellable(ctx: Any, spec: Any, tools: KernelTools, args: Any, cancel: threading.Event) -> Any:
    """Run the tool in a worker thread; report progress while it runs (when the client asked for it). On
    cancellation the thread is abandoned at once and `cancel` (set by the caller) ends its sandbox work."""
    view = tools.for_call(cancel)
    t0 = time.monotonic()
    budget = float(getattr(args, "budget_s", 0.0) or 0.0)

    async def report() -> None:
        while True:
            await anyio.sleep(PROGRESS_EVERY_S)
            elapsed = time.monotonic() - t0
            waiting = tools.attached.progress() if tools.attached.progress else ""
            message = f"{spec.name}: {elapsed:.0f} s" + (f" of at most {budget:g} s" if budget else "") + \
                (f"; {waiting}" if waiting else "")
            try:
                await ctx.session.report_progress(elapsed, budget or None, message)
            except Exception:  # a client gone, or one that does not take progress: the work goes on
                log.debug("progress notification failed", exc_info=True)
                return

    outcome: list[tuple[bool, Any]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(report)
        try:
            outcome.append((True, await anyio.to_thread.run_sync(spec.call, view, args, abandon_on_cancel=True)))
        except Exception as exc:  # raised as itself below, not in an exception group
            outcome.append((False, exc))
        finally:
            tg.cancel_scope.cancel()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


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
            return _text_result(f"{exc}. The arguments follow the tool's inputSchema; correct them and call "
                                "again.", is_error=True)
        cancel = threading.Event()
        try:
            result = await _run_cancellable(ctx, spec, tools, args, cancel)
        except anyio.get_cancelled_exc_class():
            cancel.set()  # notifications/cancelled (or the connection closed): end the run and its processes
            log.info("%s cancelled", spec.name)
            raise
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
                value: Any = encode_result(await anyio.to_thread.run_sync(tools.for_call(None).facts, FactsArgs()))
            elif uri == CELLS_URI and tools.attached.notebook:
                value = await anyio.to_thread.run_sync(tools.for_call(None).notebook_cells)
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
    """Serve on stdin/stdout; a line the SDK cannot decode is answered (`crane.mcp.unparsed`), not dropped."""
    from mcp.server.stdio import stdio_server
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    from crane.mcp.unparsed import answer

    async with stdio_server() as (read_stream, write_stream):
        inner_send, inner_read = create_context_streams[SessionMessage | Exception](0)

        async def pump() -> None:
            async with inner_send:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        reply = answer(item)
                        if reply is not None:
                            log.info("answered an unreadable message: %s", reply)
                            try:
                                await write_stream.send(SessionMessage(reply))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                        continue
                    await inner_send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await server.run(inner_read, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()


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

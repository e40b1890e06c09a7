"""`crane mcp`: CRANE as a tool for the user's own agent (Claude Code, Codex, Copilot, ...): an MCP server over one
kernel, on stdio (what agents start) or streamable HTTP on the loopback interface with a token.

The kernel, found again on every tool call (`crane.mcp.follow`), so a configured server survives kernel restarts
and may start before the kernel does: a connection file (`--connection-file F`, re-read each call; a glob
serves the newest match), the newest kernel in the Jupyter runtime folders (`--newest-kernel`), a notebook's
kernel (`--kernel-of NB`: a Jupyter Server's session with `--server URL`, else the kernel VS Code's Jupyter
extension runs for it), a kernel id on a Jupyter Server (`--server URL --kernel-id K [--token T]`); or a
notebook's recorded history replayed in a fresh kernel CRANE owns (`--notebook NB`, as `crane check` does, in the
background: `initialize` is answered at once). The handshake always completes: no kernel is a tool result with
`isError` saying why and what to do. The tools (crane.mcp.tools) never run anything in that kernel.

stdout is the MCP channel on stdio: logs and messages go to stderr. With `--http 127.0.0.1:PORT` the endpoint is
http://127.0.0.1:PORT/mcp; every request needs `Authorization: Bearer TOKEN` (`--http-token`, $CRANE_MCP_TOKEN,
else a generated one, printed to stderr). Port 0 picks a free port (printed too).

Exit code 0 when the client closed the connection; 2: a usage error (no kernel named, a bad --http address).
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import logging
import os
import secrets
import sys
import threading

from crane.commands import EXIT_ERROR, EXIT_OK
from crane.sandbox.options import add_sandbox_arguments


def _loopback(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected 127.0.0.1:PORT, got {value!r}")
    host = host.strip("[]")
    try:
        if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"--http listens on the loopback interface only (127.0.0.1, ::1), "
                                         f"not {host!r}") from None
    return host, int(port)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sandbox_arguments(p)
    where = p.add_argument_group("the kernel (one of; found again on every tool call)")
    where.add_argument("--connection-file", dest="connection_file", metavar="F",
                       help="a kernel's connection file (kernel-*.json; `%%connect_info` shows it), re-read on every "
                            "call; a glob (quoted: 'DIR/kernel-*.json') serves the newest matching kernel")
    where.add_argument("--newest-kernel", dest="newest_kernel", action="store_true",
                       help="the newest kernel in the Jupyter runtime folders (`jupyter --runtime-dir`, VS Code's "
                            "Jupyter extension's): follows restarts")
    where.add_argument("--kernel-of", dest="kernel_of", metavar="NB",
                       help="the kernel of notebook NB: with --server, the server's session for NB (a path relative "
                            "to its root); otherwise the kernel VS Code's Jupyter extension runs for NB")
    where.add_argument("--server", metavar="URL", help="a Jupyter Server (JupyterHub, gateway); with --kernel-id or "
                                                       "--kernel-of")
    where.add_argument("--kernel-id", dest="kernel_id", metavar="K", help="the kernel's id on --server")
    where.add_argument("--token", metavar="T", help="--server's token (default: $JUPYTER_TOKEN, or ?token= in URL)")
    where.add_argument("--notebook", metavar="NB",
                       help="replay this notebook's recorded history in a fresh kernel CRANE owns and serve that "
                            "(in the background: the server answers at once)")
    p.add_argument("--python", help="--notebook: interpreter for the replay kernel (default: this one)")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="--notebook: seconds allowed per history cell")
    p.add_argument("--replay-wait", dest="replay_wait", type=float, default=10.0, metavar="S",
                   help="--notebook: seconds a tool call waits for the replay before answering with its progress "
                        "(default 10)")
    p.add_argument("--http", metavar="127.0.0.1:PORT", type=_loopback,
                   help="serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio (PORT 0: a free one)")
    p.add_argument("--http-token", dest="http_token", metavar="TOKEN",
                   help="--http: the bearer token clients must send (default: $CRANE_MCP_TOKEN, else generated)")
    p.add_argument("--log-level", choices=["error", "warning", "info", "debug"], default="warning",
                   help="stderr log level (default warning)")


def _locator(args: argparse.Namespace):
    """How to find the kernel on each call (`crane.mcp.follow`). Raises KernelError for a usage error."""
    from crane.kernel.errors import KernelError
    from crane.kernel.target import KernelTarget, ServerSpec
    from crane.mcp.follow import FileLocator, FixedLocator, GlobLocator, NewestLocator, NotebookLocator

    given = [n for n in ("connection_file", "newest_kernel", "kernel_of", "kernel_id", "notebook") if getattr(args, n)]
    if len(given) != 1:
        raise KernelError("give one kernel: --connection-file F (or a glob), --newest-kernel, --kernel-of NB, "
                          "--server URL --kernel-id K, or --notebook NB")
    if (args.kernel_id or args.token) and not args.server:
        raise KernelError("--kernel-id and --token go with --server URL")
    if args.server and not (args.kernel_id or args.kernel_of):
        raise KernelError("--server needs --kernel-id K or --kernel-of NB (the kernel to serve)")
    if args.server and (args.connection_file or args.newest_kernel or args.notebook):
        raise KernelError("--server goes with --kernel-id K or --kernel-of NB")
    server = ServerSpec.parse(args.server, token=args.token) if args.server else None
    if args.connection_file:
        if glob.has_magic(args.connection_file):
            return GlobLocator(args.connection_file)
        return FileLocator(args.connection_file)
    if args.newest_kernel:
        from crane.lsp.discovery import runtime_dirs

        return NewestLocator(runtime_dirs)
    if args.kernel_of:
        return NotebookLocator(args.kernel_of, server=server, find_local=None if server else _vscode_kernel_of())
    assert server is not None
    return FixedLocator(KernelTarget.remote(server, args.kernel_id))


def _vscode_kernel_of():
    """Finds the local kernel VS Code's Jupyter extension runs for a notebook (crane.lsp.discovery)."""
    from crane.lsp.discovery import Discovery, runtime_dirs

    discovery = Discovery(timeout=2.0)

    def find(notebook: str) -> str | None:
        match = discovery.find(notebook, dirs=runtime_dirs())
        return match.connection_file if match is not None else None

    return find


def _first_look(follower) -> None:
    """Say on stderr (for whoever started the server by hand) whether the kernel is there; the server serves
    either way."""
    from crane.mcp.follow import KernelUnavailable

    try:
        follower.connection()
    except KernelUnavailable as exc:
        print(f"crane mcp: {exc}", file=sys.stderr)
    except Exception as exc:  # never fatal: every call looks again
        print(f"crane mcp: looking for the kernel failed: {exc}", file=sys.stderr)


def _attach(args: argparse.Namespace):
    """The kernel to serve, as a `crane.mcp.backend.Attached` that finds it on each call (nothing is reached
    here: a kernel that is not there yet is a tool result saying so). Raises CraneError / ValueError for a
    usage error."""
    from crane.mcp.backend import Attached

    if args.notebook and not any(getattr(args, n) for n in ("connection_file", "newest_kernel", "kernel_of",
                                                           "kernel_id", "server")):
        from crane.mcp.replay import BackgroundReplay
        from crane.notebook.model import load_notebook

        path = os.path.abspath(args.notebook)
        replay = BackgroundReplay(load_notebook(path), path, python=args.python,
                                  cell_timeout=args.cell_timeout).start()
        wait = max(0.0, float(args.replay_wait))
        return Attached(conn=None, describe=replay.describe, notebook=path, close=replay.close,
                        follow=lambda cancel: replay.connection(cancel, wait),
                        progress=lambda: "" if replay.ready else replay.progress())
    from crane.mcp.follow import KernelFollower

    follower = KernelFollower(_locator(args))
    threading.Thread(target=_first_look, args=(follower,), name="crane-mcp-first-look", daemon=True).start()
    return Attached(conn=None, describe=follower.locator.describe, close=follower.close,
                    follow=lambda cancel: follower.connection(), busy=follower.busy)


def run(args: argparse.Namespace) -> int:
    try:
        import anyio

        from crane.mcp.server import build_server, serve_http, serve_stdio
    except ImportError as exc:  # an environment installed without it
        print(f"crane mcp: the MCP SDK is missing ({exc}): pip install 'mcp==2.3.0'", file=sys.stderr)
        return EXIT_ERROR
    from crane.errors import CraneError
    from crane.mcp.backend import KernelTools
    from crane.notebook.model import NotebookError

    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        attached = _attach(args)
    except (CraneError, NotebookError, ValueError, OSError) as exc:
        print(f"crane mcp: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        server = build_server(KernelTools(attached))
        if args.http is None:
            anyio.run(serve_stdio, server)
            return EXIT_OK
        host, port = args.http
        token = args.http_token or os.environ.get("CRANE_MCP_TOKEN") or secrets.token_urlsafe(32)
        generated = not (args.http_token or os.environ.get("CRANE_MCP_TOKEN"))

        def ready(bound: int) -> None:
            shown = f"[{host}]" if ":" in host else host
            print(f"crane mcp: serving {attached.describe} at http://{shown}:{bound}/mcp", file=sys.stderr)
            if generated:
                print(f"crane mcp: token: {token}", file=sys.stderr)
            sys.stderr.flush()

        anyio.run(serve_http, server, host, port, token, ready)
        return EXIT_OK
    finally:
        attached.close()

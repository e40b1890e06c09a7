"""`crane mcp`: CRANE as a tool for the user's own agent (Claude Code, Codex, Copilot, ...): an MCP server over one
kernel, on stdio (what agents start) or streamable HTTP on the loopback interface with a token.

The kernel: a running one by its connection file (`--connection-file`), or by id on a Jupyter Server (`--server URL
--kernel-id K [--token T]`); or a notebook's recorded history replayed in a fresh kernel CRANE owns
(`--notebook NB`, as `crane check` does). The tools (crane.mcp.tools) never run anything in that kernel.

stdout is the MCP channel on stdio: logs and messages go to stderr. With `--http 127.0.0.1:PORT` the endpoint is
http://127.0.0.1:PORT/mcp; every request needs `Authorization: Bearer TOKEN` (`--http-token`, $CRANE_MCP_TOKEN,
else a generated one, printed to stderr). Port 0 picks a free port (printed too).

Exit code 0 when the client closed the connection; 2: usage or kernel error.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
import sys

from crane.commands import EXIT_ERROR, EXIT_OK
from crane.sandbox.options import add_confinement_argument, configure, options_from_args


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
    add_confinement_argument(p)  # --sandbox os|portable (crane.sandbox.options)
    where = p.add_argument_group("the kernel (one of)")
    where.add_argument("--connection-file", dest="connection_file", metavar="F",
                       help="a running kernel's connection file (kernel-*.json; `%%connect_info` shows it)")
    where.add_argument("--server", metavar="URL", help="a Jupyter Server (JupyterHub, gateway); with --kernel-id")
    where.add_argument("--kernel-id", dest="kernel_id", metavar="K", help="the kernel's id on --server")
    where.add_argument("--token", metavar="T", help="--server's token (default: $JUPYTER_TOKEN, or ?token= in URL)")
    where.add_argument("--notebook", metavar="NB",
                       help="replay this notebook's recorded history in a fresh kernel CRANE owns and serve that")
    p.add_argument("--python", help="--notebook: interpreter for the replay kernel (default: this one)")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="--notebook: seconds allowed per history cell")
    p.add_argument("--http", metavar="127.0.0.1:PORT", type=_loopback,
                   help="serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio (PORT 0: a free one)")
    p.add_argument("--http-token", dest="http_token", metavar="TOKEN",
                   help="--http: the bearer token clients must send (default: $CRANE_MCP_TOKEN, else generated)")
    p.add_argument("--log-level", choices=["error", "warning", "info", "debug"], default="warning",
                   help="stderr log level (default warning)")


def _attach(args: argparse.Namespace):
    """The kernel to serve, as a `crane.mcp.backend.Attached`. Raises CraneError / ValueError for the user."""
    from crane.kernel.client import KernelConnection
    from crane.kernel.errors import KernelError
    from crane.kernel.target import KernelTarget, ServerSpec
    from crane.mcp.backend import Attached

    given = [n for n in ("connection_file", "server", "notebook") if getattr(args, n)]
    if len(given) != 1:
        raise KernelError("give one kernel: --connection-file F, --server URL --kernel-id K, or --notebook NB")
    if (args.kernel_id or args.token) and not args.server:
        raise KernelError("--kernel-id and --token go with --server URL")
    if args.connection_file:
        target = KernelTarget.local(args.connection_file)
        conn = KernelConnection.attach(target)
        return Attached(conn=conn, describe=f"kernel {target.describe()}", close=conn.close)
    if args.server:
        if not args.kernel_id:
            raise KernelError("--server needs --kernel-id K (the kernel to serve)")
        target = KernelTarget.remote(ServerSpec.parse(args.server, token=args.token), args.kernel_id)
        conn = KernelConnection.attach(target)
        return Attached(conn=conn, describe=target.short(), close=conn.close)
    from crane.engine import ReplayedNotebook
    from crane.notebook.model import load_notebook

    path = os.path.abspath(args.notebook)
    nb = load_notebook(path)
    replayed = ReplayedNotebook(nb, [], python=args.python, cell_timeout=args.cell_timeout)
    replayed.__enter__()
    failed = [r for r in replayed.history_runs if r.status == "error"]
    if failed:
        print(f"crane mcp: {len(failed)} of {len(replayed.history_runs)} replayed cells raised (first: cell "
              f"{failed[0].number}: {failed[0].ename}: {failed[0].evalue})", file=sys.stderr)
    return Attached(conn=replayed.kernel.connection, describe=f"replay of {path}", notebook=path,
                    close=lambda: replayed.__exit__(None, None, None))


def run(args: argparse.Namespace) -> int:
    configure(options_from_args(args))  # the sandbox's options, resolved once here
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

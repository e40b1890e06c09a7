"""`crane serve`: run the CRANE language server, on stdio (what editors start) or TCP (for debugging).

stdout is the LSP channel: nothing else is ever written there. Logs go to stderr (and to the client's
log through `window/logMessage`). Once the session is over (`shutdown` has ended what the server started, `exit`
closed the channel), the process leaves promptly: see `_leave`. Its exit code is the LSP's: 0 after a `shutdown`
request, 1 when the client left without one (`exit` alone, or the end of its input).
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
import threading
from typing import BinaryIO, NoReturn, cast

from crane.commands import EXIT_ERROR, EXIT_OK

EXIT_WITHOUT_SHUTDOWN = 1  # the LSP's code for a client that left without `shutdown` (`exit` alone, input's end)


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tcp", metavar="HOST:PORT", type=_host_port, help="listen on TCP instead of stdio (debugging)")
    parser.add_argument(
        "--log-level", choices=["error", "warning", "info", "debug"], default="info", help="stderr log level (default info)"
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.log_level != "debug":  # pygls logs every message it sends at INFO
        logging.getLogger("pygls").setLevel(logging.WARNING)
    from crane.lsp.input_end import InputEnd
    from crane.lsp.lifecycle import leaving
    from crane.lsp.server import LspLogHandler, server

    handler = LspLogHandler(server)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logging.getLogger("crane").addHandler(handler)
    try:
        if args.tcp:
            host, port = args.tcp
            server.start_tcp(host, port)
        else:
            # the input's end (the editor gone without `exit`) ends the session's waits, as `exit` does
            server.start_io(cast(BinaryIO, InputEnd(sys.stdin.buffer, lambda: leaving(server))))
    except OSError as exc:
        print(f"crane serve: {exc}", file=sys.stderr)
        return EXIT_ERROR
    _leave(EXIT_OK if server.shutdown_requested else EXIT_WITHOUT_SHUTDOWN)


def _leave(code: int) -> NoReturn:
    """Leave the way the interpreter would, less its heap teardown.

    What ends things still runs, in the interpreter's own order: the non-daemon threads are waited for
    (threading's shutdown, which also ends the thread pools), then the atexit handlers (the sandbox's worker
    pool, the replay kernels, logging). What is skipped is freeing every module and object one by one: with
    litellm, pandas and the analysis engine loaded that is seconds of CPU (about 10 s on a loaded machine),
    during which the editor, or a test, waits for the process to end after `exit`."""
    finish_threads = getattr(threading, "_shutdown", None)  # what Py_Finalize calls first (CPython 3.11-3.13)
    if finish_threads is not None:
        finish_threads()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)

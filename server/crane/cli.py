"""`crane` command line: a thin dispatcher; each subcommand lives in `crane.commands.<name>`."""

from __future__ import annotations

import argparse
import os
import sys

import msgspec

from crane import __version__
from crane.commands import bench, check, diagnose, fix, mcp, serve
from crane.envflag import env_flag
from crane.errors import CraneError
from crane.sandbox.options import configure as configure_sandbox
from crane.sandbox.options import options_from_args

# name -> (module with add_arguments/run, one-line help)
SUBCOMMANDS = {
    "check": (check, "predict which cells of a notebook will crash"),
    "diagnose": (diagnose, "explain why one cell will crash (or why it failed)"),
    "fix": (fix, "repair a cell with the CRANE agent, in a sandbox"),
    "bench": (bench, "score CRANE on crash/fix benchmark cases"),
    "serve": (serve, "run the CRANE language server (stdio by default)"),
    "mcp": (mcp, "serve CRANE's tools to your own agent over MCP (stdio, or HTTP with a token)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crane", description="CRANE: crash prediction for Jupyter notebooks")
    parser.add_argument("--version", action="version", version=f"crane {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    debug = env_flag(os.environ, "CRANE_DEBUG")
    try:
        if hasattr(args, "sandbox_layer"):  # the commands that run cells: their sandbox flags, resolved once here
            configure_sandbox(options_from_args(args))
        return int(args._run(args) or 0)
    except msgspec.ValidationError as exc:  # a flag outside its declared bounds
        print(f"crane: invalid sandbox option: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("crane: interrupted", file=sys.stderr)
        return 130
    except CraneError as exc:  # CRANE's own failures carry a message for the user
        print(f"crane: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # never a bare traceback for users; CRANE_DEBUG=1 shows it
        if debug:
            raise
        print(f"crane: internal error: {type(exc).__name__}: {exc} (set CRANE_DEBUG=1 for details)", file=sys.stderr)
        return 2

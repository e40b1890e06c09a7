"""`crane check PATH...`: replay each notebook's history in a fresh kernel and predict which cells will crash.

PATHs are notebooks or folders (every `*.ipynb` below, see `check_paths`); one report covers them all, as text,
JSON (`crane.check/3`) or SARIF 2.1.0. It never writes to a notebook. Exit code: 2 when any notebook could not
be checked (or on a usage error), else 1 when a crash is predicted in any notebook, else 0 — an error in one
notebook never stops the others, and their crashes are still in the report.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from crane.commands import EXIT_CRASH, EXIT_ERROR, EXIT_OK
from crane.kernel.launch import add_server_arguments
from crane.llm.settings import SettingsError, add_llm_arguments, settings_from_args
from crane.sandbox.options import add_sandbox_arguments

if TYPE_CHECKING:
    from crane.commands.output import CheckReport

MODES = ("static", "auto", "llm")  # see crane.modes
FORMATS = ("text", "json", "sarif")
DEFAULT_MODE = "auto"  # as in the editor


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sandbox_arguments(p)
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="notebooks (.ipynb) and folders (every .ipynb below, hidden folders skipped)")
    p.add_argument(
        "--cell", type=int, action="append", metavar="N",
        help="1-based cell number to check (repeatable; one notebook only; default: every code cell not run yet)",
    )
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="report format: text (default), json (schema crane.check/3, docs/cli.md) or sarif (2.1.0)")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument(
        "--mode", choices=MODES, default=DEFAULT_MODE,
        help="static: offline rules; auto: rules, then a sandboxed speculative run confirms or clears them "
        f"(and the LLM, if configured, for undecided cells); llm: ask the model (default: {DEFAULT_MODE})",
    )
    p.add_argument("--budget", type=float, default=30.0, help="seconds per speculative run (auto mode)")
    p.add_argument("--python", help="interpreter for the replay kernels (default: this one)")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="seconds allowed per history cell")
    add_server_arguments(p)
    add_llm_arguments(p)


def _usage_error(message: str) -> int:
    print(f"crane: {message}", file=sys.stderr)
    return EXIT_ERROR


def run(args: argparse.Namespace) -> int:
    from crane.commands.check_paths import find_notebooks
    from crane.commands.check_run import CheckOptions, check_notebook
    from crane.commands.check_text import located, render_text
    from crane.commands.output import CHECK_SCHEMA, CheckReport, NotebookReport, encode
    from crane.kernel.errors import KernelError
    from crane.kernel.launch import launcher_from_args, server_session

    start = time.monotonic()
    fmt = args.format or ("json" if args.json else "text")
    if args.json and fmt != "json":
        return _usage_error(f"--json and --format {fmt} disagree: give one of them")
    try:
        settings = settings_from_args(args)
        launcher = launcher_from_args(args)
    except (SettingsError, KernelError, ValueError) as exc:
        return _usage_error(str(exc))
    if args.mode == "llm" and not settings.enabled:
        return _usage_error("--mode llm needs a model: --model M (or CRANE_MODEL)")
    targets = find_notebooks(args.paths)
    if args.cell and len(targets) != 1:
        return _usage_error(f"--cell applies to one notebook, but {len(targets)} were given or found")

    opts = CheckOptions(mode=args.mode, cells=tuple(args.cell) if args.cell else None, budget_s=args.budget,
                        python=args.python, cell_timeout_s=args.cell_timeout, launcher=launcher)
    progress = sys.stderr.isatty()
    reports: list[NotebookReport] = []
    texts: dict[str, str] = {}
    try:
        # --server: the server and token are checked first; no kernel is left on it, whatever happens
        with server_session(launcher):
            for target in targets:
                if target.error:
                    report = NotebookReport(notebook=target.path, error=target.error)
                else:
                    report, loaded = check_notebook(target.path, opts, settings, progress=progress)
                    # SARIF regions need the file's text, only where there is something to locate
                    if fmt == "sarif" and loaded is not None and any(c.findings or c.error for c in report.cells):
                        texts[target.path] = loaded.text
                if report.error:
                    print(f"crane: {located(report.notebook, report.error)}", file=sys.stderr)
                reports.append(report)
    except KernelError as exc:  # the Jupyter server refused the token or cannot be reached
        return _usage_error(f"kernel error: {exc}")

    full = CheckReport(
        schema=CHECK_SCHEMA, mode=args.mode, notebooks=reports,
        predicted_crashes=sum(nb.predicted_crashes for nb in reports),
        errors=sum(1 for nb in reports if nb.error), elapsed_s=round(time.monotonic() - start, 3),
    )
    if fmt == "json":
        print(encode(full))
    elif fmt == "sarif":
        from crane.commands.sarif import sarif_log

        print(encode(sarif_log(full, texts)))
    else:
        from crane.llm.cost import SESSION

        print(render_text(full, SESSION.totals()))
    return exit_code(full)


def exit_code(report: CheckReport) -> int:
    """2 when a notebook could not be checked, else 1 when a crash is predicted, else 0."""
    if report.errors:
        return EXIT_ERROR
    return EXIT_CRASH if report.predicted_crashes else EXIT_OK

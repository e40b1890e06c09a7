"""`crane check NOTEBOOK`: replay the notebook's history in a fresh kernel and predict which cells will crash.

It never writes to the notebook. Exit code 0: no crash predicted; 1: a crash predicted; 2: usage, input or
kernel error.
"""

from __future__ import annotations

import argparse
import sys
import time

from crane.commands import EXIT_CRASH, EXIT_ERROR, EXIT_OK
from crane.kernel.launch import add_server_arguments
from crane.llm.settings import SettingsError, add_llm_arguments, settings_from_args

MODES = ("static", "auto", "llm")  # see crane.modes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebook", help="path to an .ipynb file")
    p.add_argument(
        "--cell", type=int, action="append", metavar="N",
        help="1-based cell number to check (repeatable; default: every code cell not run yet)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON report (schema: docs/cli.md)")
    p.add_argument(
        "--mode", choices=MODES, default="static",
        help="static: offline rules; auto: rules, then a sandboxed speculative run confirms or clears them "
        "(and the LLM, if configured, for undecided cells); llm: ask the model (default: static)",
    )
    p.add_argument("--budget", type=float, default=30.0, help="seconds per speculative run (auto mode)")
    p.add_argument("--python", help="interpreter for the replay kernel (default: this one)")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="seconds allowed per history cell")
    add_server_arguments(p)
    add_llm_arguments(p)


def run(args: argparse.Namespace) -> int:
    from crane.commands.history_json import history_entries
    from crane.commands.output import CheckReport, encode
    from crane.engine import ReplayedNotebook
    from crane.kernel.errors import KernelError
    from crane.kernel.launch import launcher_from_args, server_session
    from crane.modes import predict_in_mode
    from crane.notebook.history import check_target, default_targets
    from crane.notebook.model import NotebookError, load_notebook

    start = time.monotonic()
    try:
        nb = load_notebook(args.notebook)
        targets = args.cell or default_targets(nb)
        for t in targets:
            check_target(nb, t)
    except NotebookError as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        settings = settings_from_args(args)
        launcher = launcher_from_args(args)
    except (SettingsError, KernelError, ValueError) as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.mode == "llm" and not settings.enabled:
        print("crane: --mode llm needs a model: --model M (or CRANE_MODEL)", file=sys.stderr)
        return EXIT_ERROR
    if not targets:
        print("crane: nothing to check: every code cell has run (use --cell N to pick one)", file=sys.stderr)
        return EXIT_OK

    if sys.stderr.isatty():
        n = sum(1 for c in nb.cells if c.is_code and c.execution_count is not None)
        print(f"crane: replaying {n} executed cell(s) in {launcher.where} ({nb.directory}) ...", file=sys.stderr)
    try:
        with server_session(launcher), ReplayedNotebook(nb, targets, python=args.python, cell_timeout=args.cell_timeout,
                                                        launcher=launcher) as replayed:
            results = [predict_in_mode(replayed, t, args.mode, settings, args.budget) for t in targets]
            history = history_entries(replayed.history_runs)
    except KernelError as exc:
        print(f"crane: kernel error: {exc}", file=sys.stderr)
        return EXIT_ERROR

    crashes = sum(r.prediction == "crash" for r in results)
    if args.json:
        report = CheckReport(
            schema="crane.check/1", notebook=args.notebook, mode=args.mode, cells=results,
            history=history, predicted_crashes=crashes, elapsed_s=round(time.monotonic() - start, 3),
        )
        print(encode(report))
    else:
        print(render_text(args.notebook, results, history))
    return EXIT_CRASH if crashes else EXIT_OK


def render_text(path: str, results: list, history) -> str:
    lines = []
    failed = [h for h in history if h.status == "error"]
    if failed:
        lines.append(f"history: {len(failed)} of {len(history)} replayed cells raised:")
        for h in failed:
            lines.append(f"  cell {h.cell} [{h.execution_count}]: {h.ename}: {h.evalue}")
    for r in results:
        if r.error:
            lines.append(f"{path}: cell {r.cell}: {r.error}")
        how = _how(r)
        if not r.findings:
            lines.append(f"{path}: cell {r.cell}: no crash predicted{how}")
            continue
        first = r.findings[0]
        lines.append(f"{path}: cell {r.cell}, line {first.line}: {first.ename}: {first.message}  [{first.rule}]{how}")
        for e in first.evidence:
            lines.append(f"    evidence: {e}")
        for rel in first.related:
            where = f"cell {rel.cell}" if rel.cell else "notebook"
            lines.append(f"    related: {where}: {rel.message}")
        for other in r.findings[1:]:
            lines.append(f"    also line {other.line}: {other.ename}: {other.message}  [{other.rule}]")
    usage = [r.usage for r in results if r.usage]
    if usage:
        cost = [u.cost_usd for u in usage if u.cost_usd is not None]
        money = f", ${sum(cost):.4f}" if cost else " (cost unknown for this model)"
        lines.append(f"LLM: {len(usage)} request(s), {sum(u.prompt_tokens for u in usage)} prompt + "
                     f"{sum(u.completion_tokens for u in usage)} completion tokens "
                     f"({sum(u.cached_tokens for u in usage)} cached){money}")
    n = sum(bool(r.findings) for r in results)
    lines.append(f"{n} of {len(results)} checked cell(s) predicted to crash")
    return "\n".join(lines)


def _how(r) -> str:
    """How the verdict was reached, for auto and llm modes."""
    if r.sandbox in ("crash", "no-crash"):
        extra = f"; {len(r.cleared)} rule finding(s) disproved" if r.cleared else ""
        return f"  (sandbox: {r.sandbox}{extra})"
    if r.sandbox:
        return f"  (sandbox {r.sandbox}: {r.sandbox_reason or 'inconclusive'}; rules' verdict)"
    if r.llm:
        return "  (LLM)"
    return ""

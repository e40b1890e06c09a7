"""`crane diagnose NOTEBOOK --cell N`: explain why a cell will crash (or why it already failed).

Rebuilds the state before the cell in a fresh kernel (the cells executed before it, in execution order),
probes the names the cell uses, runs the offline rules, and, with a model configured (--model, CRANE_MODEL),
asks it for a verdict grounded in those facts; a cell that already failed also sends its traceback. Without
a model the offline rules' diagnosis is printed. Prints what each answer cost.

The rules' (and the replay's) findings are always printed first; the model's part follows, marked as the
model's, and only where it agrees or adds (crane.llm.render). A failed model call is a note on stderr and in
the report: the rules' diagnosis is the result.

Exit code 0: no crash predicted; 1: a crash predicted; 2: usage, input or kernel error.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

import msgspec

from crane.commands import EXIT_CRASH, EXIT_ERROR, EXIT_OK
from crane.commands.history_json import HistoryEntry, history_entries
from crane.kernel.launch import add_server_arguments
from crane.llm.settings import add_llm_arguments
from crane.sandbox.options import add_sandbox_arguments


class DiagnoseReport(msgspec.Struct, omit_defaults=True, rename="camel"):
    schema: str  # "crane.diagnose/1"
    notebook: str
    diagnosis: object  # crane.llm.predictor.Diagnosis
    history: list[HistoryEntry] = []
    probe_error: str | None = None
    origin: list[str] = []  # where the failing line's values were made (crane.analysis.provenance)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sandbox_arguments(p)
    p.add_argument("notebook", help="path to an .ipynb file")
    p.add_argument("--cell", type=int, required=True, metavar="N", help="1-based cell number to diagnose")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--no-kernel", dest="no_kernel", action="store_true",
                   help="do not replay the history: static analysis only (no runtime facts)")
    p.add_argument("--python", help="interpreter for the replay kernel (default: this one)")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="seconds allowed per history cell")
    add_server_arguments(p)
    add_llm_arguments(p)


def history_for(nb, target) -> list:
    """The cells whose state the diagnosis is about. For a cell that already failed: the cells that ran
    before it (the state it failed against). Otherwise, as `crane check`: "if you run it now", the whole
    recorded history, including the cell's own earlier run when it has one."""
    from crane.notebook.history import executed_history

    cells = executed_history(nb)
    if target.error is not None and target.execution_count is not None:
        cells = [c for c in cells if c.execution_count < target.execution_count]
    return cells


def _gather(nb, target, history, args, launcher):
    """(findings, probe, history runs, history errors, probe error) — from a replay unless --no-kernel."""
    from crane.engine import notebook_file, predict_cell, scope_of

    if args.no_kernel:
        result, probe = predict_cell(nb, target.number, None, scope_of(nb))
        return result.findings, None, [], {}, None
    from crane.kernel.launch import server_session
    from crane.kernel.replay import replay
    from crane.probe.collect import ProbeClient

    with server_session(launcher), launcher.start(notebook_file(nb), python=args.python) as kernel:
        runs = replay(kernel.connection, history, cell_timeout=args.cell_timeout)
        result, probe = predict_cell(nb, target.number, ProbeClient(kernel.connection), scope_of(nb))
    errors = {r.number: f"{r.ename}: {r.evalue}" for r in runs if r.status == "error"}
    return result.findings, probe, runs, errors, result.error


def run(args: argparse.Namespace) -> int:
    from crane.kernel.errors import KernelError
    from crane.kernel.launch import launcher_from_args
    from crane.llm.client import LLMError
    from crane.llm.cost import SESSION
    from crane.llm.predictor import diagnose
    from crane.llm.settings import SettingsError, settings_from_args
    from crane.notebook.history import check_target
    from crane.notebook.model import NotebookError, load_notebook

    try:
        settings = settings_from_args(args)
        nb = load_notebook(args.notebook)
        target = check_target(nb, args.cell)
        launcher = launcher_from_args(args)
    except (NotebookError, SettingsError, KernelError, ValueError) as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    history = history_for(nb, target)
    traceback = None
    if target.error is not None:  # it already failed: its traceback is evidence too
        traceback = target.error.traceback or [f"{target.error.ename}: {target.error.evalue}"]
    try:
        findings, probe, runs, errors, probe_error = _gather(nb, target, history, args, launcher)
    except KernelError as exc:
        print(f"crane: kernel error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        d = diagnose(history, target, probe, findings, settings, traceback, history_errors=errors, ledger=SESSION)
    except LLMError as exc:  # a note: the rules' diagnosis is the result
        print(f"crane: LLM error: {exc}", file=sys.stderr)
        from crane.llm.predictor import offline_diagnosis

        d = offline_diagnosis(target, findings, llm_error=str(exc))
    origin = data_flow(nb, target, findings)
    if args.json:
        from crane.commands.output import encode

        report = DiagnoseReport(
            schema="crane.diagnose/1", notebook=args.notebook, diagnosis=d, probe_error=probe_error,
            history=history_entries(runs), origin=origin,
        )
        print(encode(report))
    else:
        print(render_text(args.notebook, d, runs, probe_error, origin))
    return EXIT_CRASH if d.prediction == "crash" else EXIT_OK


def data_flow(nb, target, findings) -> list[str]:
    """Where the values of the predicted failing line (the first finding's, else the cell's) were made."""
    from crane.analysis.provenance import explain_line
    from crane.analysis.scope import NotebookScope

    line = next((f.line for f in findings if getattr(f, "line", None)), None)
    if target.error is not None and line is None:
        line = getattr(target.error, "line", None)
    try:
        return explain_line(NotebookScope.from_notebook(nb), target.source, line, target.number)
    except Exception:  # an explanation never fails the diagnosis
        return []


def session_cost(t) -> str:
    """A SessionTotals' cost: "unpriced" when no request had a price, never a fake "$0.00000"."""
    priced = t.requests - t.unpriced_requests
    if t.requests and not priced:
        return "unpriced"
    return f"${t.cost_usd:.5f}" + (f" + {t.unpriced_requests} unpriced" if t.unpriced_requests else "")


def _wrap(text: str, indent: str = "    ") -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width=100, initial_indent=indent, subsequent_indent=indent + "  ")


def render_text(path: str, d, runs, probe_error: str | None, origin: list[str] | None = None) -> str:
    from crane.llm.render import finding_text, head, model_part

    out: list[str] = []
    failed = [r for r in runs if r.status == "error"]
    if failed:
        out.append(f"history: {len(failed)} of {len(runs)} replayed cells raised:")
        out += [f"  cell {r.number} [{r.execution_count}]: {r.ename}: {r.evalue}" for r in failed]
    if probe_error:
        out.append(f"{path}: cell {d.cell}: {probe_error}")
    status, detail = head(d)
    source = "" if d.mode == "llm" else " (offline rules)"
    out.append(f"{path}: cell {d.cell}: {status}" + (f": {detail}" if detail else "") + source)
    for f in d.findings:
        out.append(f"  rules: line {f.line}: {finding_text(f)}  [{f.rule}]")
        out += [f"    evidence: {e}" for e in f.evidence[:4]]
    for line in origin or []:
        out += _wrap(f"data flow: {line}", "  ")
    for label, text in model_part(d):
        out += _wrap(text, "  " if label != "fix" else "    ")
    if d.mode == "llm" and d.usage is not None:
        cached = " (from cache: not paid again)" if d.cached else ""
        out.append(f"  model {d.model}: {d.usage.describe()}{cached}")
        if d.session is not None:
            t = d.session
            cost = session_cost(t)
            out.append(f"  session: {t.requests} request(s), {t.prompt_tokens:,} prompt + "
                       f"{t.completion_tokens:,} completion tokens, {cost}")
    elif d.llm_error:
        out += _wrap(f"note: the model failed ({d.llm_error}); this is the offline rules' diagnosis", "  ")
    elif d.mode == "offline":
        out.append("  (no model configured: --model M or CRANE_MODEL for an LLM diagnosis)")
    return "\n".join(out)

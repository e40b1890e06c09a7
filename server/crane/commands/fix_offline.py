"""`crane fix NOTEBOOK --cell N --offline`: verified quick fixes without a model.

The notebook's executed history is replayed in a kernel CRANE owns; candidate repairs built from the crash and
the runtime facts run in a sandbox of that state (crane.fixes); those that run without an exception are the
verified fixes, at most three, smallest change first. With --out FIXED.ipynb or --apply the chosen one (the
first, or --pick K) is written: the edited source and, for cells to run first, execution counts after the
existing history, so that replaying the written notebook reproduces the verified run.

Exit code 0: a verified fix was written (or found, when nothing was asked to be written), or the cell does not
crash; 1: no verified fix; 2: usage, input, kernel or sandbox error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from crane.commands import EXIT_CRASH, EXIT_ERROR, EXIT_OK


class OfflineFixReport(msgspec.Struct, rename="camel"):
    schema: str  # "crane.fix.offline/1"
    notebook: str
    report: object  # crane.fixes.model.SearchReport
    chosen: int | None = None  # 1-based index of the written fix
    diff: str = ""
    written: str | None = None


def render_text(path: str, report, chosen: int | None, written: str | None) -> str:
    from crane.fixes.apply import unified_diff

    name = Path(path).name
    out = []
    crash = f" ({report.crash.text.splitlines()[0][:200]})" if report.crash else ""
    if report.status == "clean":
        return f"{path}: cell {report.target}: {report.reason or 'runs without an exception'}: nothing to fix"
    if report.crash_certain is False:  # seen only on a copy of the state (issue 42, h5): say it before any fix
        out.append(f"{path}: cell {report.target}: {report.crash_doubt or 'the crash is only likely'}; it was seen on "
                   "a copy of the kernel's state, which the kernel itself may not share: every fix below is "
                   "verified against a likely crash")
    if report.origin:
        out.append("where the failing line's values come from:")
        out += [f"  {line}" for line in report.origin]
    if report.fixes:
        out.append(f"fixes for cell {report.target} verified against a likely crash{crash}:"
                   if report.crash_certain is False else f"verified fixes for cell {report.target}{crash}:")
        for i, fix in enumerate(report.fixes, start=1):
            mark = "*" if chosen == i else " "
            out.append(f"{mark}[{i}] {fix.label}")
            if fix.detail:
                out.append(f"     why: {fix.detail}")
            if not fix.run_certain:
                out.append(f"     its run: {fix.run_doubt or 'the clean run is only likely'}")
            if fix.run_first:
                out.append(f"     run before the cell: {', '.join(f'cell {c}' for c in fix.run_first)}")
            diff = unified_diff(fix, name)
            if diff:
                out.append("\n".join("     " + ln for ln in diff.rstrip("\n").splitlines()))
    else:
        out.append(f"{path}: cell {report.target}{crash}: no verified fix"
                   + (f" ({report.reason})" if report.reason else ""))
    first = f", first after {report.first_fix_s:.1f} s" if report.first_fix_s is not None else ""
    out.append(f"  {report.tried} candidate(s) run in a {report.sandbox or 'sandbox'} sandbox, "
               f"{len(report.fixes)} verified{first}, {report.elapsed_s:.1f} s")
    for f in report.failed[:5]:
        out.append(f"  tried: {f.splitlines()[0][:160]}")
    if written:
        out.append(f"  written to {written} (fix [{chosen}])")
    elif report.fixes:
        out.append("  (nothing written: use --apply or --out FIXED.ipynb)")
    return "\n".join(out)


def run_offline(args: argparse.Namespace) -> int:
    from crane.commands.files import write_atomic
    from crane.errors import CraneError
    from crane.fixes.apply import apply_to_notebook, unified_diff
    from crane.fixes.offline import fix_notebook
    from crane.fixes.search import SearchBudget
    from crane.kernel.launch import launcher_from_args, server_session
    from crane.notebook.history import check_target
    from crane.notebook.model import NotebookError, load_notebook

    try:
        nb = load_notebook(args.notebook)
        check_target(nb, args.cell)
        original = Path(args.notebook).read_bytes()
        launcher = launcher_from_args(args)
    except (NotebookError, CraneError, ValueError, OSError) as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.pick is not None and args.pick < 1:
        print("crane: --pick must be at least 1", file=sys.stderr)
        return EXIT_ERROR

    def progress(fix) -> None:
        if not (args.quiet or args.json):
            print(f"verified after {fix.elapsed_s:.1f} s: {fix.label}", file=sys.stderr)

    budget = SearchBudget(max_seconds=300.0 if args.max_seconds is None else args.max_seconds)
    try:
        with server_session(launcher):
            report = fix_notebook(nb, args.cell, python=args.python, budget=budget, on_fix=progress, launcher=launcher)
    except CraneError as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    chosen = None
    written = None
    diff = ""
    target = Path(args.notebook) if args.apply else Path(args.out) if args.out else None
    if report.fixes:
        chosen = args.pick or 1
        if chosen > len(report.fixes):
            print(f"crane: --pick {chosen}: only {len(report.fixes)} verified fix(es)", file=sys.stderr)
            return EXIT_ERROR
        fix = report.fixes[chosen - 1]
        diff = unified_diff(fix, Path(args.notebook).name)
        if target is not None:
            try:
                write_atomic(target, apply_to_notebook(original, nb, fix))
                written = str(target)
            except (NotebookError, OSError) as exc:
                print(f"crane: could not write the fix: {exc}", file=sys.stderr)
                return EXIT_ERROR
    if args.json:
        from crane.commands.output import encode

        print(encode(OfflineFixReport(schema="crane.fix.offline/1", notebook=args.notebook, report=report,
                                      chosen=chosen, diff=diff, written=written)))
    else:
        print(render_text(args.notebook, report, chosen, written))
    if report.status == "clean":
        return EXIT_OK
    if not report.fixes:
        if target is not None:
            print("crane: no verified fix: nothing written", file=sys.stderr)
        return EXIT_CRASH
    return EXIT_OK

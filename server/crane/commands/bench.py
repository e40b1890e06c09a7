"""`crane bench DIR...`: score CRANE on crash/fix notebook pairs (../shared/bench/README.md format).

Reports, per mode: accuracy, precision, recall, F1 (crash = positive), exception-name match on crashes, false
alarms on fixed variants, scores per library and root cause, and the time per case.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from crane.bench.cases import BenchError, find_cases
from crane.bench.metrics import Scores, Timing, VariantResult, grouped, score, timing
from crane.commands import EXIT_ERROR, EXIT_OK

MODES = ("static",)


class BenchReport(msgspec.Struct, rename="camel"):
    schema: str  # "crane.bench/1"
    mode: str
    overall: Scores
    by_library: dict[str, Scores]
    by_root_cause: dict[str, Scores]
    timing: Timing
    results: list[VariantResult]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", metavar="DIR", help="bench set directories or single case directories")
    p.add_argument("--mode", choices=MODES, default="static", help="prediction mode")
    p.add_argument("--jobs", type=int, default=1, help="variants run in parallel (one kernel each)")
    p.add_argument("--json", action="store_true", help="print the full JSON report")
    p.add_argument("--python", help="interpreter for the replay kernels (default: this one)")
    p.add_argument("--quiet", action="store_true", help="no per-variant progress lines on stderr")


def _progress(r: VariantResult) -> None:
    mark = "ok " if r.correct and not r.error else "ERR" if r.error else "MISS"
    pred = f"{r.predicted_ename} ({r.rule}, line {r.line})" if r.predicted_crash else "no crash"
    exp = f"{r.expect_ename}" if r.expect_crash else "no crash"
    extra = f" error: {r.error}" if r.error else ""
    print(f"{mark} {r.case}/{r.variant}: predicted {pred}; expected {exp}; {r.seconds:.1f}s{extra}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from crane.bench.runner import PREDICTORS, run_cases
    from crane.commands.output import encode

    try:
        cases = find_cases(args.dirs)
    except BenchError as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    progress = None if args.quiet else _progress
    results = run_cases(cases, PREDICTORS[args.mode], jobs=max(1, args.jobs), python=args.python, progress=progress)
    report = BenchReport(
        schema="crane.bench/1", mode=args.mode, overall=score(results),
        by_library=grouped(results, lambda r: r.library), by_root_cause=grouped(results, lambda r: r.root_cause),
        timing=timing(results), results=results,
    )
    print(encode(report) if args.json else render_text(report))
    return EXIT_OK


def _row(label: str, s: Scores) -> str:
    em = "-" if s.ename_match is None else f"{s.ename_match:.2f}"
    return (f"{label:<24} {s.n:>4} {s.accuracy:>6.3f} {s.precision:>6.3f} {s.recall:>6.3f} {s.f1:>6.3f} "
            f"{s.false_alarm_rate:>6.3f} {em:>6}")


def render_text(rep: BenchReport) -> str:
    head = f"{'':<24} {'n':>4} {'acc':>6} {'prec':>6} {'rec':>6} {'f1':>6} {'FA':>6} {'ename':>6}"
    lines = [f"mode: {rep.mode}", head, _row("overall", rep.overall), ""]
    lines += ["by library:"] + [_row(f"  {k}", v) for k, v in rep.by_library.items()] + [""]
    lines += ["by root cause:"] + [_row(f"  {k}", v) for k, v in rep.by_root_cause.items()] + [""]
    o = rep.overall
    lines.append(f"confusion: TP {o.tp}  FP {o.fp}  TN {o.tn}  FN {o.fn}")
    errors = [r for r in rep.results if r.error]
    if errors:
        lines.append(f"variants that could not be run: {len(errors)}")
    t = rep.timing
    lines.append(f"time per variant: median {t.median_s:.2f}s, mean {t.mean_s:.2f}s, max {t.max_s:.2f}s, total {t.total_s:.1f}s")
    return "\n".join(lines)

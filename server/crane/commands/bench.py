"""`crane bench DIR...`: score CRANE on crash/fix notebook pairs (../shared/bench/README.md format).

`--fix --model M` scores the repair agent, `--fix --offline` the verified quick fixes (crane.bench.fix_offline).

Reports, per mode: accuracy, precision, recall, F1 (crash = positive), exception-name match on crashes, false
alarms on fixed variants, scores per library and root cause, and the time per case.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import msgspec

from crane.bench.cases import BenchError, find_cases
from crane.bench.metrics import Scores, Timing, VariantResult, grouped, score, timing
from crane.commands import EXIT_ERROR, EXIT_OK
from crane.kernel.errors import KernelError
from crane.kernel.launch import add_server_arguments, launcher_from_args, server_session
from crane.llm.settings import SettingsError, add_llm_arguments, settings_from_args
from crane.sandbox.options import add_sandbox_arguments

MODES = ("static", "auto", "llm")  # see crane.modes

# /2: each variant's `sandbox` is the sandbox's record of its run (crane.sandbox.verdict.SandboxVerdict), nested;
# /1 copied its mode and scale into `sandboxMode` / `sandboxScale`
BENCH_SCHEMA = "crane.bench/2"


class BenchReport(msgspec.Struct, rename="camel"):
    schema: str  # BENCH_SCHEMA
    mode: str
    overall: Scores
    by_library: dict[str, Scores]
    by_root_cause: dict[str, Scores]
    timing: Timing
    verdicts: dict[str, int]  # the verdict histogram (auto: crash/no-crash/timeout/blocked/unavailable)
    results: list[VariantResult]
    decided_by: dict[str, int] = {}  # which source decided each variant: sandbox / rules / llm / none
    sandbox_decided: float | None = None  # share of the variants the sandbox decided (auto mode)
    sandbox_scales: dict[str, int] = {}  # sandbox verdicts reached at full size / in miniature
    sandbox_modes: dict[str, int] = {}  # layered / blocking / transplant
    # auto mode: the sandbox's verdicts by the mode that reached them (layered / blocking / transplant; "not run":
    # unavailable) -> verdict -> count; decided = crash + no-crash
    sandbox_by_mode: dict[str, dict[str, int]] = {}
    rules_overall: Scores | None = None  # auto mode: the rules' own predictions, scored the same way
    kernel_unchanged: int | None = None  # auto mode: variants whose kernel the sandbox left untouched (of n)
    errored: int = 0  # variants that could not be run or whose model request failed: not in the scores
    usage: object | None = None  # crane.llm.cost.SessionTotals of the model requests (llm / auto modes)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sandbox_arguments(p)
    p.add_argument("dirs", nargs="+", metavar="DIR", help="bench set directories or single case directories")
    p.add_argument("--mode", choices=MODES, default="static", help="prediction mode")
    p.add_argument("--jobs", type=int, default=1, help="variants run in parallel (one kernel each)")
    p.add_argument("--json", action="store_true", help="print the full JSON report")
    p.add_argument("--python", help="interpreter for the replay kernels (default: this one)")
    p.add_argument("--quiet", action="store_true", help="no per-variant progress lines on stderr")
    p.add_argument("--real-run", dest="real_run", action="store_true",
                   help="then run each target cell for real in its replay kernel and score whether the predicted "
                        "exception and message are what it raised (message match)")
    p.add_argument("--budget", type=float, default=30.0, help="seconds per speculative run (auto mode)")
    p.add_argument("--fix", action="store_true",
                   help="run the repair agent on every buggy variant (needs --model) and report the fix rate")
    p.add_argument("--max-steps", dest="max_steps", type=int, default=10, help="agent steps per case (--fix)")
    p.add_argument("--no-offline-first", dest="offline_first", action="store_false",
                   help="with --fix --model: do not search the verified quick fixes first (the agent's starting "
                        "point; up to 60 s per variant)")
    p.add_argument("--offline", action="store_true",
                   help="with --fix: the verified quick fixes, no model (repair rate checked in a fresh kernel)")
    p.add_argument("--dry-run", action="store_true",
                   help="llm mode: build every prompt and report its size and token count; call no model")
    add_server_arguments(p)
    add_llm_arguments(p)


def _progress(r: VariantResult) -> None:
    if r.verdict == "dry-run" and not r.error:  # no model was asked: there is no prediction to mark
        print(f"dry {r.case}/{r.variant}: {r.message}", file=sys.stderr)
        return
    mark = "ok " if r.correct and not r.error else "ERR" if r.error else "MISS"
    pred = f"{r.predicted_ename} ({r.rule}, line {r.line})" if r.predicted_crash else "no crash"
    exp = f"{r.expect_ename}" if r.expect_crash else "no crash"
    extra = f" error: {r.error}" if r.error else ""
    print(f"{mark} {r.case}/{r.variant}: predicted {pred}; expected {exp}; {r.seconds:.1f}s{extra}", file=sys.stderr)


def _predictor(args: argparse.Namespace, settings):
    from crane.bench.runner import ModePredictor, static_predictor

    if args.mode == "llm":
        from crane.bench.llm_predictor import LLMBenchPredictor

        return LLMBenchPredictor(settings, dry_run=args.dry_run)
    if args.mode == "auto":
        return ModePredictor("auto", settings if settings.enabled else None, args.budget)
    return static_predictor


def run(args: argparse.Namespace) -> int:
    try:
        cases = find_cases(args.dirs)
        settings = settings_from_args(args)
        launcher = launcher_from_args(args)
    except (BenchError, SettingsError, KernelError, ValueError) as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        with server_session(launcher):
            return _run(args, cases, settings, launcher)
    except KernelError as exc:  # the server refused the token or cannot be reached
        print(f"crane: kernel error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _run(args: argparse.Namespace, cases, settings, launcher) -> int:
    from crane.bench.runner import run_cases
    from crane.commands.output import encode

    if args.fix and args.offline:
        return _run_fix_offline(args, cases, launcher)
    if args.offline:
        print("crane: --offline goes with --fix", file=sys.stderr)
        return EXIT_ERROR
    if args.fix:
        return _run_fix(args, cases, settings, launcher)
    if args.dry_run and args.mode != "llm":
        print("crane: --dry-run goes with --mode llm", file=sys.stderr)
        return EXIT_ERROR
    if args.mode == "llm" and not args.dry_run and not settings.enabled:
        print("crane: --mode llm needs a model: --model M (or CRANE_MODEL), or --dry-run", file=sys.stderr)
        return EXIT_ERROR
    predictor = _predictor(args, settings)
    progress = None if args.quiet else _progress
    results = run_cases(cases, predictor, jobs=max(1, args.jobs), python=args.python, progress=progress,
                        launcher=launcher, real=args.real_run)
    if args.dry_run:
        from crane.llm.predictor import dry_run_stats

        stats = dry_run_stats(predictor.prompts)
        errors = [f"{r.case}/{r.variant}: {r.error}" for r in results if r.error]
        print(encode({"schema": "crane.bench.dryrun/1", "prompts": stats, "errors": errors}) if args.json
              else render_dry_run(stats, errors))
        return EXIT_OK
    report = build_report(args.mode, results)
    print(encode(report) if args.json else render_text(report))
    if results and report.errored == len(results):
        print(f"crane: all {len(results)} variants errored: no score", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def build_report(mode: str, results: list[VariantResult]) -> BenchReport:
    """The report of a prediction run. An errored variant (no kernel, the model failed) is no prediction: it is
    counted in `errored` and listed, never scored (as "no crash" or otherwise)."""
    scored = [r for r in results if not r.error]
    report = BenchReport(
        schema=BENCH_SCHEMA, mode=mode, overall=score(scored),
        by_library=grouped(scored, lambda r: r.library), by_root_cause=grouped(scored, lambda r: r.root_cause),
        timing=timing(results), verdicts=dict(Counter(r.verdict or "error" for r in results)), results=results,
        errored=len(results) - len(scored),
        decided_by=dict(Counter(r.decided_by for r in results if r.decided_by)),
        sandbox_scales=dict(Counter(v.scale for r in results if (v := r.sandbox_ran))),
        sandbox_modes=dict(Counter(v.mode for r in results if (v := r.sandbox_ran) and v.mode)),
    )
    if mode == "auto" and results:
        report.sandbox_decided = round(sum(r.decided_by == "sandbox" for r in results) / len(results), 4)
        report.kernel_unchanged = sum(r.kernel_unchanged is True for r in results)
        report.sandbox_by_mode = _by_mode(results)
    if mode != "static":
        from crane.llm.cost import SESSION

        report.rules_overall = _rules_scores(scored)
        totals = SESSION.totals()
        if totals.requests or totals.failed_requests or totals.cache_hits:
            report.usage = totals
    return report


def _by_mode(results: list[VariantResult]) -> dict[str, dict[str, int]]:
    """The sandbox's verdict histogram per mode (auto mode): which confinement or transplant reached what."""
    by: dict[str, Counter] = {}
    for r in results:
        if r.error or r.verdict is None:
            continue
        ran = r.sandbox_ran
        key = (ran.mode if ran else None) or ("not run" if r.verdict == "unavailable" else None)
        if key is not None:
            by.setdefault(key, Counter())[r.verdict] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(by.items())}


def _mode_lines(rep: BenchReport) -> list[str]:
    """'  transplant   14: crash 7, no-crash 7 (decided 14/14)' for each mode."""
    lines = ["sandbox by mode:"] if rep.sandbox_by_mode else []
    for mode, verdicts in rep.sandbox_by_mode.items():
        n = sum(verdicts.values())
        decided = verdicts.get("crash", 0) + verdicts.get("no-crash", 0)
        lines.append(f"  {mode:<12} {n:>4}: " + ", ".join(f"{k} {v}" for k, v in verdicts.items())
                     + f" (decided {decided}/{n})")
    return lines


def _message_lines(rep: BenchReport) -> list[str]:
    """--real-run: how many predicted messages are the kernel's, and the ones that are not."""
    lines = []
    for label, s in (("", rep.overall), ("the rules alone: ", rep.rules_overall)):
        if s is not None and s.message_match is not None:
            lines.append(f"{label}message match (exception and message as the kernel raised them): "
                         f"{round(s.message_match * s.messages_compared)}/{s.messages_compared}")
    for r in rep.results:
        if r.message_compared and not r.message_matches:
            lines.append(f"  {r.case}/{r.variant}: predicted {r.predicted_ename}: {(r.message or '')[:150]!r}; "
                         f"the kernel: {r.real_ename}: {(r.real_message or '')[:150]!r}")
    return lines


def _rules_scores(results: list[VariantResult]) -> Scores | None:
    """The rules' own predictions (recorded before the sandbox or the model decided), scored as a static run."""
    ran = [r for r in results if r.rules_predicted_crash is not None]
    return score([msgspec.structs.replace(r, predicted_crash=r.rules_predicted_crash,
                                          predicted_ename=r.rules_predicted_ename, message=r.rules_predicted_message)
                  for r in ran]) if ran else None


def _row(label: str, s: Scores) -> str:
    em = "-" if s.ename_match is None else f"{s.ename_match:.2f}"
    return (f"{label:<24} {s.n:>4} {s.accuracy:>6.3f} {s.precision:>6.3f} {s.recall:>6.3f} {s.f1:>6.3f} "
            f"{s.false_alarm_rate:>6.3f} {em:>6}")


def render_text(rep: BenchReport) -> str:
    head = f"{'':<24} {'n':>4} {'acc':>6} {'prec':>6} {'rec':>6} {'f1':>6} {'FA':>6} {'ename':>6}"
    lines = [f"mode: {rep.mode}", head, _row("overall", rep.overall)]
    if rep.errored:
        lines.append(f"  {rep.errored} of {len(rep.results)} variants errored: not in the scores (see below)")
    if rep.rules_overall is not None:
        lines.append(_row("  the rules alone", rep.rules_overall))
    lines.append("")
    lines += ["by library:"] + [_row(f"  {k}", v) for k, v in rep.by_library.items()] + [""]
    lines += ["by root cause:"] + [_row(f"  {k}", v) for k, v in rep.by_root_cause.items()] + [""]
    o = rep.overall
    lines.append(f"confusion: TP {o.tp}  FP {o.fp}  TN {o.tn}  FN {o.fn}")
    lines += _message_lines(rep)
    lines.append("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(rep.verdicts.items())))
    if rep.decided_by:
        lines.append("decided by: " + ", ".join(f"{k} {v}" for k, v in sorted(rep.decided_by.items())))
    if rep.sandbox_decided is not None:
        n = len(rep.results)
        lines.append(f"decided by the sandbox: {round(rep.sandbox_decided * n)}/{n} ({rep.sandbox_decided:.1%})"
                     + (" at scale " + ", ".join(f"{k} {v}" for k, v in sorted(rep.sandbox_scales.items()))
                        if rep.sandbox_scales else "")
                     + (" in mode " + ", ".join(f"{k} {v}" for k, v in sorted(rep.sandbox_modes.items()))
                        if rep.sandbox_modes else ""))
    lines += _mode_lines(rep)
    if rep.kernel_unchanged is not None:
        unknown = sum(r.kernel_unchanged is None for r in rep.results)
        lines.append(f"kernel left untouched by the sandbox: {rep.kernel_unchanged}/{len(rep.results)}"
                     + (f" ({unknown} could not be watched)" if unknown else ""))
    errors = [r for r in rep.results if r.error]
    if errors:
        lines.append(f"variants that errored (not scored): {len(errors)}")
        lines += [f"  {r.case}/{r.variant}: {(r.error or '')[:200]}" for r in errors[:20]]
    if rep.usage is not None:
        lines.append("LLM: " + rep.usage.describe())  # type: ignore[attr-defined]
    t = rep.timing
    lines.append(f"time per variant: median {t.median_s:.2f}s, mean {t.mean_s:.2f}s, max {t.max_s:.2f}s, total {t.total_s:.1f}s")
    return "\n".join(lines)


def render_dry_run(stats: dict, errors: list[str]) -> str:
    lines = ["mode: llm (dry run: prompts built, no model called)"]
    for key, value in stats.items():
        lines.append(f"  {key}: {value}")
    if errors:
        lines.append(f"variants whose prompt could not be built: {len(errors)}")
        lines += [f"  {e}" for e in errors]
    return "\n".join(lines)


def _run_fix(args: argparse.Namespace, cases, settings, launcher) -> int:
    """`crane bench --fix`: the repair agent on every buggy variant; fixed = target clean in a fresh replay."""
    from crane.agent.loop import AgentBudget
    from crane.bench.fix import render_text as render_fix
    from crane.bench.fix import run_fix_bench
    from crane.commands.output import encode

    if not settings.enabled:
        print("crane: --fix needs a model: --model M (or CRANE_MODEL)", file=sys.stderr)
        return EXIT_ERROR

    def progress(r) -> None:
        mark = "ok " if r.fixed else "NO "
        print(f"{mark} {r.case}/{r.variant}: {r.steps} steps, {r.seconds:.1f}s {r.error or ''}", file=sys.stderr)

    rep = run_fix_bench(cases, settings, budget=AgentBudget(max_steps=args.max_steps), python=args.python,
                        progress=None if args.quiet else progress, launcher=launcher,
                        offline_first=getattr(args, "offline_first", True))
    print(encode(rep) if args.json else render_fix(rep))
    return EXIT_OK


def _run_fix_offline(args: argparse.Namespace, cases, launcher) -> int:
    """`crane bench --fix --offline`: verified quick fixes; repaired = the written notebook runs clean."""
    from crane.bench.fix_offline import render_text as render_offline
    from crane.bench.fix_offline import run_offline_fix_bench
    from crane.commands.output import encode

    def progress(r) -> None:
        mark = "ERR" if r.error else "ok " if r.repaired else "NO "
        title = r.offered[0].title if r.offered else (r.error or r.reason or r.status)
        first = f"first fix {r.first_fix_s:.1f}s, " if r.first_fix_s is not None else ""
        print(f"{mark} {r.case}/{r.variant}: {title[:90]} ({first}{r.seconds:.1f}s)", file=sys.stderr)

    rep = run_offline_fix_bench(cases, python=args.python, jobs=max(1, args.jobs),
                                progress=None if args.quiet else progress, launcher=launcher)
    print(encode(rep) if args.json else render_offline(rep))
    return EXIT_OK

"""`crane bench --fix --offline`: verified quick fixes on every buggy variant of bench cases, scored for real.

Per buggy variant (expect.crash true): replay the notebook, search verified fixes (crane.fixes.offline), then
for EVERY offered fix write it into the notebook file (crane.fixes.apply) and execute the written notebook in
a fresh kernel in the case folder — its executed cells in execution-count order, then the target. A variant
is repaired when the first offered fix runs clean there; an offered fix that raises there is counted
(`appliedFailures`: must stay 0). Agreement with the case's fixed notebook: the written notebook has the same
code as the fixed one (cell by cell, compared as parsed Python) and runs the same extra cells first.
"""

from __future__ import annotations

import ast
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

from crane.agent.guard import check_edit, parse_cell
from crane.bench.cases import Case
from crane.fixes.apply import apply_to_notebook, changes
from crane.fixes.model import VerifiedFix
from crane.fixes.offline import fix_notebook
from crane.fixes.search import SearchBudget
from crane.notebook.history import executed_history
from crane.notebook.model import Notebook, load_notebook, parse_notebook


class OfferedFix(msgspec.Struct, rename="camel", omit_defaults=True):
    title: str
    kind: str
    run_first: list[int] = []
    replay_status: str = ""  # the target in a fresh kernel running the written notebook: ok | error
    replay_error: str | None = None
    guard_ok: bool = True
    matches_fixed: bool = False
    elapsed_s: float = 0.0  # from the search's start until this fix was verified


class FixCase(msgspec.Struct, rename="camel", omit_defaults=True):
    case: str
    variant: str
    target: int
    status: str = ""  # the search's: fixed | not-fixed | clean | unverifiable
    crash: str = ""
    # the crash seen in the search's sandbox was certain (None: none seen); False: only "likely" (a copy of the
    # state that may have missed what it rests on: `crash_doubt`), its fixes "verified against a likely crash"
    crash_certain: bool | None = None
    crash_doubt: str = ""
    repaired: bool = False  # the first offered fix runs clean in a fresh kernel
    offered: list[OfferedFix] = []
    tried: int = 0
    first_fix_s: float | None = None  # search start → first verified fix
    search_s: float = 0.0
    seconds: float = 0.0  # the whole variant, replays included
    reason: str = ""
    error: str | None = None


class FixBenchSummary(msgspec.Struct, rename="camel"):
    cases: int
    repaired: int
    repair_rate: float
    offered: int  # variants with at least one verified fix
    applied_failures: int  # offered fixes that raised when the written notebook ran in a fresh kernel
    guard_violations: int
    agree_top: int  # the first offered fix is the fixed notebook's
    agree_any: int  # one of the offered fixes is
    agreement_top: float | None  # agree_top / repaired
    median_first_fix_s: float | None
    max_first_fix_s: float | None
    median_seconds: float
    total_seconds: float
    likely_crashes: int = 0  # variants whose crash was only "likely" in the search's sandbox (issue 42, h5)


class FixBenchReport(msgspec.Struct, rename="camel"):
    schema: str  # "crane.bench.fix.offline/1"
    summary: FixBenchSummary
    results: list[FixCase]


def _norm(source: str) -> str:
    tree = parse_cell(source)
    if tree is not None:
        return ast.dump(tree)
    return "\n".join(ln.rstrip() for ln in source.strip().splitlines())


def matches_fixed(nb: Notebook, fixed: Notebook, fix: VerifiedFix) -> bool:
    """The written notebook has the fixed notebook's code (cell by cell, as parsed Python) and runs the same
    extra cells before the target."""
    if len(nb.cells) != len(fixed.cells):
        return False
    edited = changes(fix)
    for a, b in zip(nb.cells, fixed.cells, strict=True):
        if a.cell_type != b.cell_type:
            return False
        source = edited[a.number][1] if a.number in edited else a.source
        if a.is_code and _norm(source) != _norm(b.source):
            return False
    extra = {c.number for c in fixed.cells if c.is_code and c.execution_count is not None and c.number != fix.target
             and nb.cell(c.number).execution_count is None}
    return extra == set(fix.run_first) - {c.cell for c in fix.cell_edits}


def replay_written(data: bytes, path: str, target: int, python: str | None = None,
                   cell_timeout: float = 600.0, launcher=None) -> tuple[str, str | None]:
    """(status, "Ename: evalue") of the target after a fresh kernel ran the written notebook's history. Run
    locally, it runs in a copy of the notebook's folder (what the cells write stays out of the bench set)."""
    from crane.engine import notebook_file
    from crane.kernel.launch import LOCAL
    from crane.kernel.replay import replay

    launcher = launcher or LOCAL
    copy = None
    if launcher is LOCAL:
        copy = tempfile.mkdtemp(prefix="crane-fix-replay-")
        folder = Path(copy) / "case"
        shutil.copytree(Path(path).resolve().parent, folder, symlinks=True)
        path = str(folder / Path(path).name)
        Path(path).write_bytes(data)
    try:
        written = parse_notebook(data, path)
        history = [c for c in executed_history(written) if c.number != target]
        with launcher.start(notebook_file(written), python=python) as kernel:
            replay(kernel.connection, history, cell_timeout=cell_timeout)
            res = kernel.connection.run_cell(written.cell(target).source, timeout=cell_timeout)
    finally:
        if copy is not None:
            shutil.rmtree(copy, ignore_errors=True)
    return res.status, (f"{res.ename}: {(res.evalue or '')[:200]}" if res.status != "ok" else None)


def fix_variant(case: Case, name: str, python: str | None = None, budget: SearchBudget | None = None,
                launcher=None) -> FixCase:
    variant = case.variants[name]
    result = FixCase(case=case.id, variant=name, target=variant.target_cell)
    start = time.monotonic()
    try:
        path = Path(case.directory) / variant.notebook
        nb = load_notebook(path)
        data = path.read_bytes()
        fixed = _fixed_notebook(case)
        t0 = time.monotonic()
        report = fix_notebook(nb, variant.target_cell, python=python, budget=budget, launcher=launcher)
        result.search_s = round(time.monotonic() - t0, 3)
        result.status, result.tried, result.first_fix_s = report.status, report.tried, report.first_fix_s
        result.crash = report.crash.text.splitlines()[0][:200] if report.crash else ""
        result.crash_certain, result.crash_doubt = report.crash_certain, report.crash_doubt
        result.reason = report.reason
        for fix in report.fixes:
            status, error = replay_written(apply_to_notebook(data, nb, fix), str(path), fix.target, python=python,
                                           launcher=launcher)
            line = report.crash.line if report.crash else None
            result.offered.append(OfferedFix(
                title=fix.title, kind=fix.kind, run_first=list(fix.run_first), replay_status=status,
                replay_error=error, guard_ok=_guard_ok(fix, line),
                matches_fixed=fixed is not None and matches_fixed(nb, fixed, fix), elapsed_s=fix.elapsed_s))
        top = result.offered[0] if result.offered else None
        result.repaired = top is not None and top.replay_status == "ok" and top.guard_ok
    except Exception as exc:  # one broken case is reported, the bench goes on
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = round(time.monotonic() - start, 3)
    return result


def _guard_ok(fix: VerifiedFix, line: int | None) -> bool:
    if fix.new != fix.old and check_edit(fix.old, fix.new, line) is not None:
        return False
    return all(check_edit(c.old, c.new) is None for c in fix.cell_edits)


def _fixed_notebook(case: Case) -> Notebook | None:
    for v in case.variants.values():
        if not v.expect.crash:
            try:
                return load_notebook(Path(case.directory) / v.notebook)
            except Exception:
                return None
    return None


def summarize(results: list[FixCase]) -> FixBenchSummary:
    n = len(results)
    repaired = sum(r.repaired for r in results)
    firsts = [r.first_fix_s for r in results if r.first_fix_s is not None]
    secs = [r.seconds for r in results]
    agree_top = sum(1 for r in results if r.repaired and r.offered[0].matches_fixed)
    return FixBenchSummary(
        cases=n, repaired=repaired, repair_rate=round(repaired / n, 4) if n else 0.0,
        offered=sum(1 for r in results if r.offered),
        applied_failures=sum(1 for r in results for o in r.offered if o.replay_status != "ok"),
        guard_violations=sum(1 for r in results for o in r.offered if not o.guard_ok),
        agree_top=agree_top, agree_any=sum(1 for r in results if any(o.matches_fixed for o in r.offered)),
        agreement_top=round(agree_top / repaired, 4) if repaired else None,
        median_first_fix_s=round(statistics.median(firsts), 3) if firsts else None,
        max_first_fix_s=round(max(firsts), 3) if firsts else None,
        median_seconds=round(statistics.median(secs), 3) if secs else 0.0, total_seconds=round(sum(secs), 3),
        likely_crashes=sum(1 for r in results if r.crash_certain is False),
    )


def run_offline_fix_bench(cases: list[Case], *, python: str | None = None, jobs: int = 1,
                          budget: SearchBudget | None = None,
                          progress: Callable[[FixCase], None] | None = None, launcher=None) -> FixBenchReport:
    """Every variant whose target is expected to crash (the buggy variants)."""
    items = [(c, name) for c in cases for name, v in c.variants.items() if v.expect.crash]

    def one(item: tuple[Case, str]) -> FixCase:
        r = fix_variant(item[0], item[1], python=python, budget=budget, launcher=launcher)
        if progress is not None:
            progress(r)
        return r

    if jobs <= 1:
        results = [one(i) for i in items]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, items))
    return FixBenchReport(schema="crane.bench.fix.offline/1", summary=summarize(results), results=results)


def render_text(rep: FixBenchReport) -> str:
    lines = [f"{'case':<26} {'repaired':>8} {'offered':>7} {'agree':>5} {'first':>6} {'time':>6}  fix"]
    for r in rep.results:
        mark = "ERR" if r.error else "yes" if r.repaired else "no"
        agree = "top" if r.offered and r.offered[0].matches_fixed else "any" if any(o.matches_fixed for o in r.offered) \
            else "-"
        first = f"{r.first_fix_s:.1f}s" if r.first_fix_s is not None else "-"
        title = r.offered[0].title if r.offered else (r.error or r.reason or r.status)
        lines.append(f"{(r.case + '/' + r.variant)[:26]:<26} {mark:>8} {len(r.offered):>7} {agree:>5} {first:>6} "
                     f"{r.seconds:>5.1f}s  {title[:70]}")
    s = rep.summary
    lines.append("")
    med = f"{s.median_first_fix_s:.2f}s" if s.median_first_fix_s is not None else "-"
    agree = f"{s.agreement_top:.3f}" if s.agreement_top is not None else "-"
    lines.append(f"repaired {s.repaired}/{s.cases} (repair rate {s.repair_rate:.3f}, each written notebook run in a "
                 f"fresh kernel); offered on {s.offered}; offered fixes that failed when applied: "
                 f"{s.applied_failures}; guard violations: {s.guard_violations}")
    lines.append(f"time to the first verified fix: median {med}, max "
                 f"{(f'{s.max_first_fix_s:.2f}s' if s.max_first_fix_s is not None else '-')}; agreement with the "
                 f"fixed notebooks: top {s.agree_top}/{s.repaired} ({agree}), any offered {s.agree_any}; "
                 f"median {s.median_seconds:.1f}s per variant, total {s.total_seconds:.1f}s")
    if s.likely_crashes:  # (issue 42, h5) fixes verified against a crash seen only on a copy of the state
        lines.append(f"crashes only likely in the search's sandbox (their fixes verified against a likely crash): "
                     f"{s.likely_crashes}")
    return "\n".join(lines)

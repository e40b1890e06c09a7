"""The verified-fix search: observe the crash in the sandbox, generate candidates, run each against the live
state (its cells to run first, then the edited target), keep those that run without an exception.

    report = search_fixes(nb, target, sandbox, pre=facts, on_fix=callback, should_stop=event.is_set)

Candidates are tried cheapest first (smallest change, fewest cells to run); the first `max_fixes` that run
clean are the offered fixes, in that order. A candidate that gets past the original crash but raises another
exception further on is the base of follow-up candidates for the new crash (up to `max_depth` edits deep),
read from the state at that new crash point; a cell to run first that raises a NameError brings in the cell
binding that name. Every candidate passed the anti-hack guard (crane.fixes.generate). Blocking; the sandbox
is the caller's (never the user's kernel).
"""

from __future__ import annotations

import difflib
import heapq
import itertools
import logging
import re
import time
from collections.abc import Callable

import msgspec

from crane.agent.sandboxes import ExecResult
from crane.analysis.cell import analyze_cell, plan_probe
from crane.analysis.provenance import explain_line
from crane.analysis.scope import NotebookScope
from crane.finding import Finding
from crane.fixes.context import RUN_CELL_COST, FixContext
from crane.fixes.generate import generate
from crane.fixes.model import Attempt, Candidate, CellChange, Crash, SearchReport, VerifiedFix
from crane.fixes.names import extend_plan
from crane.fixes.sandbox import FixSandbox
from crane.notebook.history import check_target
from crane.notebook.model import Notebook
from crane.probe.facts import ProbeResult

log = logging.getLogger(__name__)


class SearchBudget(msgspec.Struct, kw_only=True, frozen=True):
    max_seconds: float = 30.0  # the whole search
    max_candidates: int = 24  # candidates run in the sandbox
    max_fixes: int = 3
    max_depth: int = 2  # edits built on edits
    max_children: int = 8  # follow-up candidates per candidate


def _crash(result) -> Crash:
    tb = [ln for ln in (result.traceback or "").splitlines() if ln.strip()][-12:]
    return Crash(ename=result.ename or "Error", evalue=(result.evalue or "")[:2000], line=result.line, traceback=tb)


def search_fixes(
    nb: Notebook,
    target: int,
    sandbox: FixSandbox,
    *,
    pre: ProbeResult | None = None,
    findings: list[Finding] | None = None,
    scope: NotebookScope | None = None,
    budget: SearchBudget | None = None,
    on_fix: Callable[[VerifiedFix], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    fresh: Callable[[Notebook], FixSandbox] | None = None,
) -> SearchReport:
    """Verified fixes for cell `target` of `nb` (see the module docstring). Raises NotebookError for a bad
    target; sandbox failures end the search with what was found. `fresh(notebook)`: a sandbox replaying a
    notebook's history in a new kernel, for candidates the live state cannot verify (`Candidate.fresh`; without
    it they are not tried)."""
    b = budget or SearchBudget()
    t0 = time.monotonic()
    source = check_target(nb, target).source
    scope = scope or NotebookScope.from_notebook(nb)
    report = SearchReport(target=target, status="not-fixed", sandbox=sandbox.kind)

    def done(status: str | None = None, reason: str = "") -> SearchReport:
        if status:
            report.status = status  # type: ignore[assignment]
        elif report.fixes:
            report.status = "fixed"
        report.reason = reason or report.reason
        report.elapsed_s = round(time.monotonic() - t0, 3)
        return report

    sandbox.reset()
    first = sandbox.run(source)
    observed = True  # the session holds the state at the crash point (post-mortem facts can be read)
    if first.status == "blocked":  # a side effect the session refuses: run it in a private layer instead
        observed = False
        first = sandbox.run_layered([source]) or first
    if first.status == "ok" and first.certain:
        return done("clean", "the crash could not be reproduced: the cell runs without an exception in the sandbox")
    if first.status == "ok":  # a clean run that is only likely (issue 42, h5): no crash to fix, none ruled out
        return done("unverifiable", f"the cell ran clean in the sandbox, but {first.doubt or 'only likely'}: the "
                                    "crash could neither be reproduced nor ruled out")
    if first.status != "error":
        return done("unverifiable", f"the sandbox cannot run the cell: {first.status}: {first.evalue or ''}".strip())
    report.crash = crash = _crash(first)
    # the crash may be only "likely" for the user's kernel (seen on a copy that may have missed what it rests on):
    # the search goes on, and the report and every fix say so (issue 42, h5)
    report.crash_certain, report.crash_doubt = first.certain, first.doubt
    report.origin = explain_line(scope, source, crash.line, target)

    def context(src: str, cr: Crash, run_first: tuple[int, ...], depth: int, pre_facts,
                cell_edits: tuple[tuple[int, str], ...] = (), blind: bool = False) -> FixContext:
        """`blind`: the run happened elsewhere (a private layer): no state at the crash point to ask."""
        post = sandbox.facts(plan_probe(analyze_cell(src))) if observed and not blind else None
        return FixContext(nb=nb, target=target, original=source, source=src, crash=cr, scope=scope,
                          pre=pre_facts, post=post, findings=list(findings or []), run_first=run_first, depth=depth,
                          ask=None if blind else sandbox.facts, evaluator=None if blind else sandbox.evaluate,
                          guard_line=crash.line, cell_edits=cell_edits)

    seq = itertools.count()
    heap: list[tuple[float, int, Candidate]] = []

    def push(cands: list[Candidate]) -> None:
        for c in cands:
            heapq.heappush(heap, (c.cost, next(seq), c))

    push(generate(context(source, crash, (), 1, pre), report.refused))
    observed = True
    push(_in_defining_cell(nb, target, source, scope, crash, first.traceback, sandbox, report.refused))
    tried: set[tuple] = set()
    while heap:
        if len(report.fixes) >= b.max_fixes:
            break
        if time.monotonic() - t0 > b.max_seconds:
            report.reason = f"time budget ({b.max_seconds:g} s)"
            break
        if report.tried >= b.max_candidates:
            report.reason = f"candidate budget ({b.max_candidates})"
            break
        if should_stop is not None and should_stop():
            report.reason = "stopped"
            break
        _, _, cand = heapq.heappop(heap)
        if cand.key in tried or (cand.fresh and fresh is None):
            continue
        tried.add(cand.key)
        report.tried += 1
        try:
            outcome = _verify_fresh(nb, target, cand, fresh) if cand.fresh and fresh is not None else \
                _verify(nb, cand, sandbox)
        except Exception as exc:  # a broken sandbox ends the search with what it has
            log.warning("fixes: the sandbox failed (%s)", exc)
            report.reason = f"sandbox error: {exc}"
            break
        status, result, failed_cell = outcome
        layered = cand.fresh  # run elsewhere: no state at the crash point here
        if status == "blocked" and not cand.fresh:  # a side effect the session refuses: the same cells in a private layer
            again = sandbox.run_layered([dict(cand.cell_edits).get(k, nb.cell(k).source) for k in cand.run_first]
                                        + [cand.source])
            if again is not None:
                status, result, failed_cell, layered = again.status, again, None, True
        rechecked = status == "ok" and fresh is not None and not cand.fresh and _moves_history(nb, scope, cand)
        if rechecked and fresh is not None:
            # the written notebook runs these cells at their new place only: check it as replayed after a restart
            try:
                again_status, again_result, again_cell = _verify_fresh(nb, target, cand, fresh)
            except Exception as exc:
                again_status, again_result, again_cell = "unavailable", None, None
                log.info("fixes: no fresh replay (%s)", exc)
            if again_status != "ok":
                what = f"{again_result.ename}: {(again_result.evalue or '').splitlines()[0][:160]}" \
                    if again_result is not None and again_result.ename else again_status
                where = f" in cell {again_cell}" if again_cell is not None else ""
                report.attempts.append(Attempt(kind=cand.kind, title=cand.title, status=again_status,
                                               error=f"the written notebook, replayed fresh: {what}{where}",
                                               depth=cand.depth))
                continue
        if status == "ok":
            edited = dict(cand.cell_edits)
            fix = VerifiedFix(kind=cand.kind, title=_say_removals(cand, nb, source), target=target, old=source,
                              new=cand.source,
                              run_first=cand.run_first,
                              run_first_sources=tuple(edited.get(k, nb.cell(k).source) for k in cand.run_first),
                              cell_edits=tuple(CellChange(cell=k, old=nb.cell(k).source, new=s)
                                               for k, s in cand.cell_edits), to_code=cand.to_code,
                              detail=cand.detail, cost=cand.cost,
                              sandbox="fresh" if cand.fresh else f"{sandbox.kind}-layered" if layered
                              else sandbox.kind + ("+fresh" if rechecked else ""),
                              elapsed_s=round(time.monotonic() - t0, 3), stdout=(result.stdout or "")[-2000:],
                              crash_certain=first.certain, crash_doubt=first.doubt,
                              # (a fix run again in a fresh replay kernel, a real one, is certain there)
                              run_certain=result.certain or rechecked, run_doubt="" if rechecked else result.doubt)
            report.fixes.append(fix)
            report.attempts.append(Attempt(kind=cand.kind, title=cand.title, status="ok", depth=cand.depth))
            if report.first_fix_s is None:
                report.first_fix_s = fix.elapsed_s
            if on_fix is not None:
                try:
                    on_fix(fix)
                except Exception:
                    log.exception("fixes: on_fix listener failed")
            continue
        what = f"{result.ename}: {(result.evalue or '').splitlines()[0][:160] if result.evalue else ''}" \
            if result.ename else (result.evalue or "")[:160]
        where = f" (in cell {failed_cell}, run first)" if failed_cell is not None else ""
        report.attempts.append(Attempt(kind=cand.kind, title=cand.title, status=result.status, error=what + where,
                                       depth=cand.depth))
        if result.status != "error" or (layered and result.ename != "NameError"):
            continue  # no follow-up without the state at the crash point (a missing name needs none)
        if failed_cell is not None:  # a cell to run first needs another cell: bring it in
            plan = extend_plan(context(cand.source, crash, cand.run_first, cand.depth, pre), cand.run_first,
                               failed_cell, result.evalue or "") if result.ename == "NameError" else None
            if plan is not None:
                push([msgspec.structs.replace(cand, run_first=plan, cost=cand.cost + RUN_CELL_COST,
                                              title=_plan_title(cand, plan))])
            continue
        new_crash = _crash(result)
        if cand.depth >= b.max_depth or _same_failure(new_crash, cand.source, crash, source):
            continue  # no progress: the candidate fails where and as the cell did
        child = context(cand.source, new_crash, cand.run_first, cand.depth + 1, None if cand.run_first else pre,
                        cand.cell_edits, blind=layered)
        followups = [c for c in generate(child, report.refused) if c.key not in tried]
        push([msgspec.structs.replace(c, title=_combine(cand, c)) for c in followups[: b.max_children]])
    return done()


def _shape(evalue: str) -> str:
    """An exception message without its quoted values and numbers (the kind of failure)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "", evalue.splitlines()[0] if evalue else "")
    return re.sub(r"\d+", "", text).strip()


def _origin_line(old: str, new: str, line: int | None) -> int | None:
    """The line of `old` that line `line` of `new` comes from (kept or rewritten in place), or None (inserted)."""
    if line is None:
        return None
    a, b = old.splitlines(), new.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if j1 < line <= j2:
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                return i1 + (line - j1)
            return None
    return None


def _same_failure(a: Crash, a_source: str, b: Crash, b_source: str) -> bool:
    """The same kind of exception from the same statement (lines move when a candidate inserts some; the
    statement may be the candidate's rewrite of the failing one)."""
    return a.ename == b.ename and _shape(a.evalue) == _shape(b.evalue) and \
        _origin_line(b_source, a_source, a.line) == b.line


def _say_removals(cand: Candidate, nb: Notebook, source: str) -> str:
    """The candidate's title, with what its edits remove when the title does not say it already."""
    from crane.agent.removals import removal_note

    notes = [n for n in [removal_note(source, cand.source)] if n]
    notes += [f"cell {k} {n}" for k, new in cand.cell_edits if (n := removal_note(nb.cell(k).source, new))]
    if not notes or cand.title.lower().startswith(("drop", "remove")):
        return cand.title
    return f"{cand.title} ({'; '.join(notes)})"


def _plan_title(cand: Candidate, plan: tuple[int, ...]) -> str:
    cells = ", ".join(map(str, plan))
    head = f"Run cell {cells} first" if len(plan) == 1 else f"Run cells {cells} first"
    if cand.title.startswith("Run cell"):
        return head
    return f"{cand.title.split('; ')[0]}; {head[0].lower()}{head[1:]}"


def _combine(parent: Candidate, child: Candidate) -> str:
    if parent.title.startswith("Run cell") and (child.title.startswith("Run cell") or "; run cell" in child.title):
        return child.title  # the child's plan holds the parent's cells
    return f"{parent.title}; {child.title[0].lower()}{child.title[1:]}"


def _verify(nb: Notebook, cand: Candidate, sandbox: FixSandbox):
    """(status, result, failed run-first cell): the candidate's cells to run first (edited ones edited), then
    the edited target."""
    sandbox.reset()
    edited = dict(cand.cell_edits)
    for k in cand.run_first:
        r = sandbox.run(edited.get(k, nb.cell(k).source))
        if r.status != "ok":
            return r.status, r, k
    r = sandbox.run(cand.source)
    return r.status, r, None


def written_notebook(nb: Notebook, target: int, cand: Candidate) -> Notebook:
    """The notebook as `crane fix --out` writes the candidate (crane.fixes.apply): edited sources, and the cells
    to run first counted after the existing history, in order."""
    edited = dict(cand.cell_edits)
    edited[target] = cand.source
    last = max((c.execution_count or 0 for c in nb.cells if c.is_code), default=0)
    counts = {k: last + i for i, k in enumerate(cand.run_first, start=1)}
    cells = [msgspec.structs.replace(c, source=edited.get(c.number, c.source),
                                     cell_type="code" if c.number in cand.to_code else c.cell_type,
                                     execution_count=None if c.number == target else
                                     counts.get(c.number, c.execution_count)) for c in nb.cells]
    return msgspec.structs.replace(nb, cells=cells)


def _moves_history(nb: Notebook, scope: NotebookScope, cand: Candidate) -> bool:
    """Could the written fix run differently from the sandbox's run? The written notebook runs an edited cell,
    or a cell that ran before and is run again, only at its new count (after the history): a cell of the history
    that ran after it there and reads what it binds or changes (and is not run again) then runs without it."""
    from crane.analysis.provenance import history, reads_of, touches

    moved = {k for k, _ in cand.cell_edits} | {k for k in cand.run_first
                                               if nb.cell(k).is_code and nb.cell(k).execution_count is not None}
    hist = history(scope)
    for m in moved:
        d = scope.cell(m)
        if d is None or d.execution_count is None:
            continue
        made = set(d.binds) | {n for n in reads_of(d) if any(t.how != "binds" for t in touches(d, n))}
        later = [e for e in hist if (e.execution_count or 0) > d.execution_count and e.number not in cand.run_first]
        if any(reads_of(e) & made for e in later):
            return True
    return False


def _verify_fresh(nb: Notebook, target: int, cand: Candidate, fresh: Callable[[Notebook], FixSandbox]):
    """(status, result, failed run-first cell) in a new kernel replaying the written notebook: the fix as the user
    would run it after a restart (its cells to run first are in that history, after the rest)."""
    written = written_notebook(nb, target, cand)
    box = fresh(written)
    try:
        runs = {r.number: r for r in getattr(getattr(box, "inner", None), "history_runs", [])}
        for k in cand.run_first:
            r = runs.get(k)
            if r is not None and r.status != "ok":
                return r.status, ExecResult(status=r.status, ename=r.ename, evalue=r.evalue), k
        res = box.run(cand.source)
        return res.status, res, None
    finally:
        box.close()


_FRAME = re.compile(r"^(?P<file>.+?), line (?P<line>\d+), in (?P<fn>[^:]+?)(?:: (?P<text>.*))?$")


def defining_frame(nb: Notebook, target: int, traceback: str) -> tuple[int, int] | None:
    """(cell, line) of the innermost frame of the crash that is code of another notebook cell (a function the
    target calls, defined there), matched by the frame's line text; None when the crash is in the target or a
    library."""
    frames = [m for ln in (traceback or "").splitlines() if (m := _FRAME.match(ln.strip()))]
    for m in reversed(frames):
        file = m.group("file")
        if file == "cell":
            return None  # the innermost user frame is the target's own
        if (file.startswith("<") and not file.startswith("<ipython-input")) or "site-packages" in file \
                or "/lib/python" in file or "dist-packages" in file:
            continue
        line, text = int(m.group("line")), (m.group("text") or "").strip()
        if not text:
            return None
        hits = [c.number for c in nb.cells if c.is_code and c.number != target
                and len(lines := c.source.splitlines()) >= line and lines[line - 1].strip()[:160] == text]
        if not hits:
            return None
        definers = [n for n in hits if (d := scope_cell(nb, n)) is not None and m.group("fn") in d.binds]
        return ((definers or hits)[-1], line)
    return None


def scope_cell(nb: Notebook, number: int):
    from crane.analysis.scope import cell_defs

    cell = nb.cell(number)
    return cell_defs(number, cell.execution_count, cell.source) if cell.is_code else None


def _in_defining_cell(nb: Notebook, target: int, source: str, scope: NotebookScope, crash: Crash, traceback: str,
                      sandbox: FixSandbox, refused: list[str]) -> list[Candidate]:
    """Candidates that edit the cell defining the function the crash happened in (run it again, edited, first)."""
    where = defining_frame(nb, target, traceback)
    if where is None:
        return []
    cell, line = where
    other = nb.cell(cell).source
    ctx = FixContext(nb=nb, target=target, original=other, source=other,
                     crash=msgspec.structs.replace(crash, line=line), scope=scope, ask=sandbox.facts,
                     evaluator=sandbox.evaluate, guard_line=line)
    out = []
    for c in generate(ctx, refused):
        if c.source == other:
            continue  # only edits of that cell (running cells first is the target's own search)
        plan = tuple(sorted(set(c.run_first) | {cell}))
        title = f"Cell {cell}: {c.title[0].lower()}{c.title[1:]}; run it again"
        out.append(Candidate(kind=c.kind, title=title, source=source, run_first=plan, cell_edits=((cell, c.source),),
                             cost=round(c.cost + RUN_CELL_COST, 2), detail=f"the crash is in cell {cell}: {c.detail}"))
    return out

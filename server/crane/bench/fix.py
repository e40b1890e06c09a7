"""`crane bench --fix --model M`: run the repair agent on every buggy variant of bench cases and score it.

A case counts as fixed when (1) the agent's proposal, written into the notebook file (crane.agent.nbwrite),
makes the target cell run clean in a *fresh replay of the edited notebook* — a new kernel in the case folder
runs the edited notebook's executed history in execution order, then the cells the proposal says to run
first that have no execution count (added or never-run cells), then the target — and (2) the final diff
passes the guard. Reported per case: fixed, the agent's status, steps, tokens (prompt, cached, completion),
cost and time; overall: fix rate, input tokens per resolved case, totals.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from crane.agent.guard import check_edit
from crane.agent.loop import AgentBudget, start_fix
from crane.agent.nbwrite import apply_proposal
from crane.agent.proposal import Proposal
from crane.agent.sandboxes import replay_sandbox_factory
from crane.bench.cases import Case
from crane.llm.settings import LLMSettings
from crane.notebook.history import executed_history
from crane.notebook.model import Notebook, NotebookError, load_notebook, parse_notebook
from crane.text import cell_line, clean_traceback


class FixCaseResult(msgspec.Struct, rename="camel", omit_defaults=True):
    case: str
    variant: str
    target: int
    fixed: bool = False  # clean in a fresh replay of the edited notebook, guard respected
    agent_status: str = ""
    stop_reason: str = ""
    guard_ok: bool = True
    replay_status: str = ""  # the target's outcome in the fresh replay
    replay_error: str | None = None
    steps: int = 0
    edits: int = 0
    additions: int = 0
    run_first: list[int] = []
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0
    error: str | None = None
    offline_fixes: int | None = None  # verified quick fixes offered to the agent (None: not searched)
    requests: int = 0  # model requests that got a reply
    focused_requests: int = 0  # of which focused asks (code wanted, no tool call: crane.agent.focused)
    focused_fix: bool = False  # the agent's accepted fix came from a focused ask
    turns_without_call: int = 0  # tool-call turns with no usable tool call (none, or every one lost)
    usable_calls: int = 0  # tool calls read and run (a repeat within one reply counted once)
    lost_calls: list[str] = []  # tool calls that could not be read, each with the reason


class FixBenchSummary(msgspec.Struct, rename="camel"):
    cases: int
    fixed: int
    fix_rate: float
    mean_steps: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    input_tokens_per_fixed: float | None  # prompt tokens over all cases / fixed cases
    cost_usd: float | None
    median_seconds: float
    total_seconds: float
    requests: int = 0
    focused_requests: int = 0  # of the requests, focused asks (no tool call wanted)
    tool_call_rate: float | None = None  # tool-call turns with a usable tool call / tool-call turns
    usable_calls: int = 0
    lost_calls: int = 0
    fixed_without_offline: int = 0  # fixed where the offline search had found no verified fix


class FixBenchReport(msgspec.Struct, rename="camel"):
    schema: str  # "crane.bench.fix/1"
    model: str
    summary: FixBenchSummary
    results: list[FixCaseResult]


def edited_positions(nb: Notebook, proposal: Proposal) -> dict[int, int]:
    """Agent cell numbers (original and added) -> 1-based positions in the edited notebook file."""
    order: list[int] = []
    for a in range(0, len(nb.cells) + 1):
        if a:
            order.append(a)
        order += [add.cell for add in proposal.additions if add.after == a]
    return {n: i for i, n in enumerate(order, start=1)}


def replay_edited(nb: Notebook, proposal: Proposal, python: str | None = None,
                  cell_timeout: float = 600.0, launcher=None) -> tuple[str, str | None]:
    """(target status, "Ename: evalue") in a fresh replay of the notebook file with the proposal applied;
    the kernel starts where `launcher` (crane.kernel.launch) says, here by default."""
    from crane.engine import notebook_file
    from crane.kernel.launch import LOCAL
    from crane.kernel.replay import replay

    if nb.path is None:  # the bench loads every notebook from its file
        raise NotebookError("the notebook has no file to re-read")
    data = Path(nb.path).read_bytes()
    edited = parse_notebook(apply_proposal(data, proposal), nb.path)
    pos = edited_positions(nb, proposal)
    history = executed_history(edited)
    in_history = {c.number for c in history}
    extra = [edited.cell(pos[c]) for c in proposal.run_first if pos[c] not in in_history]
    target = edited.cell(pos[proposal.target])
    with (launcher or LOCAL).start(notebook_file(edited), python=python) as kernel:
        replay(kernel.connection, [c for c in history if c.number != target.number], cell_timeout=cell_timeout)
        for c in extra:
            kernel.connection.run_cell(c.source, timeout=cell_timeout)
        res = kernel.connection.run_cell(target.source, timeout=cell_timeout)
    return res.status, (f"{res.ename}: {(res.evalue or '')[:200]}" if res.status != "ok" else None)


def guard_ok(nb: Notebook, proposal: Proposal) -> bool:
    for e in proposal.edits:
        cell = nb.cell(e.cell)
        line = cell_line(clean_traceback(cell.error.traceback)) if cell.error and cell.error.traceback else None
        if check_edit(e.old, e.new, line) is not None:
            return False
    return True


def fix_variant(case: Case, name: str, settings: LLMSettings, budget: AgentBudget | None = None,
                python: str | None = None, sandbox_factory=None, launcher=None,
                offline_first: bool = True) -> FixCaseResult:
    """One buggy variant: the verified quick fixes searched first (`offline_first`) and offered to the agent as
    its starting point, as `crane fix --model` does; then the agent; then a fresh replay of its proposal."""
    variant = case.variants[name]
    result = FixCaseResult(case=case.id, variant=name, target=variant.target_cell)
    start = time.monotonic()
    try:
        nb = load_notebook(Path(case.directory) / variant.notebook)
        candidates: list = []
        if offline_first:
            from crane.agent.candidates import verified_candidates

            candidates, _ = verified_candidates(nb, variant.target_cell, python=python, launcher=launcher)
            result.offline_fixes = len(candidates)
        p = start_fix(nb, variant.target_cell, settings, budget=budget, candidates=candidates,
                      sandbox_factory=sandbox_factory or replay_sandbox_factory(python=python, launcher=launcher))
        u = p.usage
        result.agent_status, result.stop_reason, result.steps = p.status, p.stop_reason, p.steps
        result.edits, result.additions, result.run_first = len(p.edits), len(p.additions), p.run_first
        result.prompt_tokens, result.cached_tokens = u.prompt_tokens, u.cached_tokens
        result.completion_tokens, result.cost_usd = u.completion_tokens, u.cost_usd
        result.requests, result.focused_requests = u.requests, p.calls.focused_requests
        result.focused_fix = p.calls.focused_fixed
        result.turns_without_call = max(0, u.requests - p.calls.focused_requests - p.calls.usable_turns)
        result.usable_calls, result.lost_calls = p.calls.usable, list(p.calls.lost)
        if p.status in ("fixed", "not-fixed", "stopped") and (p.changes_code or p.run_first):
            result.guard_ok = guard_ok(nb, p)
            result.replay_status, result.replay_error = replay_edited(nb, p, python=python, launcher=launcher)
            result.fixed = result.replay_status == "ok" and result.guard_ok
        elif p.status == "clean":
            result.error = "the target cell already runs clean: not a buggy variant?"
        elif p.status == "error":
            result.error = p.stop_reason
    except Exception as exc:  # one broken case is reported, the bench goes on
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = round(time.monotonic() - start, 3)
    return result


def summarize(results: list[FixCaseResult]) -> FixBenchSummary:
    n = len(results)
    fixed = sum(r.fixed for r in results)
    prompt = sum(r.prompt_tokens for r in results)
    priced = [r.cost_usd for r in results if r.cost_usd is not None]
    secs = [r.seconds for r in results]
    requests = sum(r.requests for r in results)
    focused_requests = sum(r.focused_requests for r in results)
    turns = requests - focused_requests
    return FixBenchSummary(
        cases=n, fixed=fixed, fix_rate=round(fixed / n, 4) if n else 0.0,
        mean_steps=round(statistics.fmean([r.steps for r in results]), 2) if n else 0.0,
        prompt_tokens=prompt, cached_tokens=sum(r.cached_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        input_tokens_per_fixed=round(prompt / fixed, 1) if fixed else None,
        cost_usd=round(sum(priced), 6) if priced else None,
        median_seconds=round(statistics.median(secs), 3) if secs else 0.0, total_seconds=round(sum(secs), 3),
        requests=requests, focused_requests=focused_requests,
        tool_call_rate=round(1 - sum(r.turns_without_call for r in results) / turns, 4) if turns else None,
        usable_calls=sum(r.usable_calls for r in results), lost_calls=sum(len(r.lost_calls) for r in results),
        fixed_without_offline=sum(r.fixed and r.offline_fixes == 0 for r in results),
    )


def run_fix_bench(cases: list[Case], settings: LLMSettings, *, budget: AgentBudget | None = None,
                  python: str | None = None, progress: Callable[[FixCaseResult], None] | None = None,
                  sandbox_factory=None, launcher=None, offline_first: bool = True) -> FixBenchReport:
    """Run the agent on every variant whose target is expected to crash (the buggy variants)."""
    results = []
    for case in cases:
        for name, variant in case.variants.items():
            if not variant.expect.crash:
                continue
            r = fix_variant(case, name, settings, budget=budget, python=python, sandbox_factory=sandbox_factory,
                            launcher=launcher, offline_first=offline_first)
            if progress:
                progress(r)
            results.append(r)
    return FixBenchReport(schema="crane.bench.fix/1", model=settings.model or "", summary=summarize(results),
                          results=results)


def render_text(rep: FixBenchReport) -> str:
    lines = [f"{'case':<28} {'fixed':>5} {'steps':>5} {'prompt':>8} {'cached':>7} {'compl':>6} {'cost':>9} {'time':>6}"]
    for r in rep.results:
        cost = f"{r.cost_usd:.5f}" if r.cost_usd is not None else "-"
        mark = "yes" if r.fixed else "ERR" if r.error else "no"
        lines.append(f"{(r.case + '/' + r.variant)[:28]:<28} {mark:>5} {r.steps:>5} {r.prompt_tokens:>8} "
                     f"{r.cached_tokens:>7} {r.completion_tokens:>6} {cost:>9} {r.seconds:>5.1f}s")
    s = rep.summary
    lines.append("")
    per = f"{s.input_tokens_per_fixed:,.0f}" if s.input_tokens_per_fixed is not None else "-"
    cost = f"${s.cost_usd:.5f}" if s.cost_usd is not None else "unknown (model not priced)"
    lines.append(f"model {rep.model}: fixed {s.fixed}/{s.cases} (fix rate {s.fix_rate:.3f}), mean steps "
                 f"{s.mean_steps}, input tokens per fixed case {per}, cost {cost}, median {s.median_seconds:.1f}s "
                 f"per case, total {s.total_seconds:.1f}s")
    if s.tool_call_rate is not None:
        lines.append(f"model replies with a usable tool call: {s.tool_call_rate:.1%} of "
                     f"{s.requests - s.focused_requests} ({s.usable_calls} usable call(s), {s.lost_calls} lost)")
    if s.focused_requests:
        lines.append(f"focused asks (the failing line put to the model alone): {s.focused_requests}; fixes from "
                     f"them: {sum(r.fixed and r.focused_fix for r in rep.results)}")
    lines.append(f"fixed where the offline search found no verified fix: {s.fixed_without_offline}")
    return "\n".join(lines)

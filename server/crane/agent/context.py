"""The agent's conversation prefix: the system prompt and one context message (the numbered notebook, the
error or predicted crash, the runtime facts, the goal). Both are built once per run and never change, so the
prefix stays stable while observations are appended.
"""

from __future__ import annotations

import msgspec

from crane.finding import Finding
from crane.llm.facts_text import facts_text
from crane.llm.prompt import clean_traceback, findings_text
from crane.notebook.model import Notebook
from crane.probe.facts import ProbeResult

MAX_CELL_LINES = 80
MAX_NOTEBOOK_CHARS = 24000

SYSTEM_PROMPT = """You are CRANE's repair agent for Jupyter notebooks. You fix one target cell so that it runs \
without raising, by editing, adding and executing cells in a sandbox: a copy of the notebook's kernel state. \
Nothing you do touches the user's kernel; the user reviews your proposal before anything is applied.

Work in small steps, one tool call per turn, each with a short reflection:
- inspect expressions to read the data and objects the cell uses (columns, dtypes, shapes, values);
- edit_cell / add_cell to change code; execute_cell to run a cell (your edited and added cells before it are \
re-run first, in notebook order);
- finish with a short explanation once the target cell has run clean.

Rules:
- Prefer a fix that needs no code change when it is real: if an earlier cell that was never run (or was \
skipped) defines what the target needs, execute it, then execute the target.
- Fix the cause. Wrapping the failing code in try/except (or contextlib.suppress), deleting or commenting out \
the failing statements, or emptying a cell is refused by CRANE's guard.
- Keep edits minimal and in the notebook's style; edit an earlier cell when the problem comes from there.
- The fix is accepted only if the target cell runs clean in a fresh sandbox after your changes."""


class FixContext(msgspec.Struct, kw_only=True):
    """What the agent knows at the start (also reported in the proposal's evidence)."""

    target: int
    goal: str | None = None
    error: str | None = None  # "KeyError: 'Age'" when the target already failed (or failed in the sandbox)
    traceback: str = ""
    failing_line: int | None = None
    findings: list[Finding] = []
    probe: ProbeResult | None = None
    candidates: list = []  # crane.fixes.model.VerifiedFix: repairs that already ran clean in a sandbox
    # the crash observed in the sandbox (None: recorded in the notebook, or none) is certain for the user's kernel;
    # False: only "likely" (a copy of its state that may have missed what it rests on; `crash_doubt` says why)
    crash_certain: bool | None = None
    crash_doubt: str = ""


def notebook_text(nb: Notebook, target: int) -> str:
    parts = []
    total = 0
    for c in nb.cells:
        if c.is_code:
            count = f"[{c.execution_count}]" if c.execution_count is not None else "[ ] (never run)"
            head = f"### Cell {c.number} {count}" + ("  <- TARGET" if c.number == target else "")
        else:
            head = f"### Cell {c.number} ({c.cell_type})"
        lines = c.source.splitlines()
        if not c.is_code:
            lines = lines[:6]
        if len(lines) > MAX_CELL_LINES and c.number != target:
            lines = lines[:MAX_CELL_LINES] + [f"... ({len(lines) - MAX_CELL_LINES} more lines)"]
        body = "\n".join(lines)
        if c.is_code and c.error is not None and c.number != target:
            body += f"\n# (this cell's last run raised {c.error.ename}: {c.error.evalue[:200]})"
        block = f"{head}\n{body}"
        if total + len(block) > MAX_NOTEBOOK_CHARS and c.number != target:
            block = f"{head}\n(omitted: the notebook is long)"
        total += len(block)
        parts.append(block)
    return "\n\n".join(parts)


def context_message(nb: Notebook, ctx: FixContext) -> str:
    parts = ["## Notebook (cells numbered; [n] is the execution count; the kernel ran the cells with a count, "
             "in count order)\n" + notebook_text(nb, ctx.target)]
    if ctx.error:
        p = f"## The target cell {ctx.target} raises\n{ctx.error}"
        if ctx.failing_line:
            p += f" (line {ctx.failing_line})"
        if ctx.traceback:
            p += "\n" + clean_traceback(ctx.traceback)
        if ctx.crash_certain is False:  # (issue 42, h5)
            p += (f"\nNote: {ctx.crash_doubt or 'the crash is only likely'}. It was seen in the sandbox, a copy of "
                  "the kernel's state that may have missed what it rests on: the user's kernel may not raise it. Fix "
                  "what the code says; a fix is accepted as verified against a likely crash only.")
        parts.append(p)
    if ctx.findings:
        parts.append("## CRANE's prediction for the target cell\n" + findings_text(ctx.findings))
    flow = data_flow_text(nb, ctx)
    if flow:
        parts.append(flow)
    if ctx.probe is not None:
        text, _ = facts_text(ctx.probe)
        parts.append("## Runtime state (names the target uses)\n" + (text or "(nothing notable)"))
    if ctx.candidates:
        parts.append(candidates_text(ctx.candidates))
    if ctx.goal:
        parts.append(f"## The user's goal for cell {ctx.target}\n{ctx.goal}")
    task = f"## Task\nMake cell {ctx.target} run clean"
    task += " and meet the user's goal." if ctx.goal else "."
    parts.append(task)
    return "\n\n".join(parts)


def data_flow_text(nb: Notebook, ctx: FixContext) -> str:
    """Where the failing line's values were made and changed (crane.analysis.provenance): the cells that can hold
    the cause."""
    from crane.analysis.provenance import explain_line
    from crane.analysis.scope import NotebookScope

    line = ctx.failing_line or next((f.line for f in ctx.findings if getattr(f, "line", None)), None)
    try:
        lines = explain_line(NotebookScope.from_notebook(nb), nb.cell(ctx.target).source, line, ctx.target)
    except Exception:  # an explanation never stops the agent
        return ""
    if not lines:
        return ""
    return ("## Where the failing line's values come from (the cause may be in one of these cells)\n"
            + "\n".join(f"- {ln}" for ln in lines))


def candidates_text(fixes: list) -> str:
    """The verified quick fixes CRANE found without a model (crane.fixes), for the agent to start from."""
    out = ["## Verified candidate fixes (each already ran clean in a sandbox of the current state; smallest first)",
           "If one is right, apply it (edit_cell with its source, or execute the cells it runs first) and finish; "
           "otherwise improve on it."]
    for i, f in enumerate(fixes, start=1):
        head = f"{i}. {f.title}"
        if getattr(f, "verification", "verified") != "verified":
            head += f" ({f.verification})"
        if f.run_first:
            head += f" — run cell{'s' if len(f.run_first) > 1 else ''} {', '.join(map(str, f.run_first))} first"
        out.append(head)
        if getattr(f, "detail", ""):
            out.append(f"   why: {f.detail}")
        for c in getattr(f, "cell_edits", ()):
            out.append(f"   new source of cell {c.cell}:\n```python\n{c.new.rstrip()}\n```")
        if f.new != f.old:
            out.append(f"   new source of cell {f.target}:\n```python\n{f.new.rstrip()}\n```")
    return "\n".join(out)


def initial_messages(nb: Notebook, ctx: FixContext) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": context_message(nb, ctx)}]

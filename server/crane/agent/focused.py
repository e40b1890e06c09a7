"""The focused ask: the failing line put to the model alone, for code back.

In the full conversation (the whole notebook, the tools, the history of the run) a small local model can fail to
move past the failing code: Qwen2.5-Coder-0.5B sent the target's own code back in 29 of 30 turns, at temperature 0
and 0.8 alike. Asked a short question instead — the target cell, the line that raises and the error, a few
variables in words (the cell's own, then the models and data the notebook bound: crane.agent.plain_facts), the
changes already tried and what they raised, "reply with only code" — the same model writes changed code (a
prediction in place of an undefined name, a missing argument). So when a turn makes no progress, the loop
(crane.agent.loop) asks this question a few times, for the line and for the whole cell, at rising temperatures;
each reply is merged into the cell (crane.agent.snippet) and run in the sandbox like any edit. The model only
proposes: the guard and the sandbox decide, and the fix is accepted only when the target runs clean in a fresh one.
"""

from __future__ import annotations

import difflib
from typing import Literal

import msgspec

from crane.agent.context import FixContext
from crane.agent.plain_facts import plain_line, rank
from crane.agent.snippet import merge_reply, reply_code
from crane.notebook.model import Notebook
from crane.probe.facts import ProbeResult

Ask = Literal["line", "cell"]

SYSTEM = "You fix Python code in a Jupyter notebook cell. Reply with only code, no explanation."
MAX_OTHER_NAMES = 25  # other variables probed
MAX_VARIABLES = 5  # variable lines an ask shows: the cell's own names (3 at most) first, then the others by rank
MAX_TRIED = 3  # earlier failed changes an ask shows
MAX_CELL_LINES = 40  # a longer cell is asked for its failing line only
# (what is asked, temperature): the first round, then each later one
FIRST_ROUND: list[tuple[Ask, float]] = [("line", 0.0), ("cell", 0.0), ("line", 0.7), ("cell", 0.7),
                                        ("line", 1.0), ("cell", 1.0)]
LATER_ROUND: list[tuple[Ask, float]] = [("line", 1.0), ("cell", 1.0), ("line", 1.0), ("cell", 1.0)]
MAX_ROUNDS = 2


class FocusedAsk(msgspec.Struct, frozen=True):
    ask: Ask
    temperature: float
    messages: list[dict]
    max_tokens: int


def plan(round_no: int, source: str, failing_line: int | None) -> list[tuple[Ask, float]]:
    """The asks of round `round_no` (0-based) for a cell: the line asks need a known failing line, the cell asks a
    cell short enough to be written back whole."""
    steps = FIRST_ROUND if round_no == 0 else LATER_ROUND
    lines = source.splitlines()
    has_line = failing_line is not None and 1 <= failing_line <= len(lines)
    return [(a, t) for a, t in steps if (a == "line" and has_line) or (a == "cell" and len(lines) <= MAX_CELL_LINES)]


def other_names(nb: Notebook, target: int, used: set[str]) -> list[str]:
    """The names the notebook's executed cells bound (the latest first; imports and `_names` left out) that the
    target does not use: what a change may use instead (the fitted model the cell meant, the test features an
    unrun cell would have predicted from)."""
    from crane.analysis.scope import NotebookScope

    ran = [d for d in NotebookScope.from_notebook(nb).cells if d.execution_count is not None and d.number != target]
    out: list[str] = []
    for d in sorted(ran, key=lambda d: d.execution_count or 0, reverse=True):
        out += [n for n in d.binds if n not in d.imports and n not in used and n not in out and not n.startswith("_")]
    return out[:MAX_OTHER_NAMES]


def variable_lines(used: ProbeResult | None, others: ProbeResult | None, names: list[str]) -> list[str]:
    """The variables an ask shows, in words (crane.agent.plain_facts): the names the cell uses that exist (its
    undefined ones are in the error), then the other variables `names`, models first, then data."""
    lines = [plain_line(n, f) for n, f in (used.facts.items() if used else []) if f.kind != "module"][:3]
    facts = others.facts if others else {}
    ranked = sorted((rank(f), i, n) for i, n in enumerate(names) if (f := facts.get(n)) and f.kind != "module")
    lines += [plain_line(n, facts[n], columns=False) for _, _, n in ranked]
    return lines[:MAX_VARIABLES]


def ask(ctx: FixContext, source: str, kind: Ask, temperature: float, variables: list[str],
        tried: list[str] | None = None) -> FocusedAsk:
    """One request about the target cell (its `source` as the notebook has it): the cell, the line that raises and
    the error, the variables, the changes already tried that failed (`tried`, "`code` -> what it raised"), and the
    task: the line alone (`kind` "line") or the whole cell."""
    lines = source.splitlines()
    k = ctx.failing_line if ctx.failing_line and 1 <= ctx.failing_line <= len(lines) else None
    error = (ctx.error or "").strip()[:400]
    where = f"Line {k} (`{lines[k - 1].strip()[:200]}`) raises:\n{error}" if k else f"The cell raises:\n{error}"
    parts = [f"Cell:\n```python\n{source.rstrip()}\n```\n{where}"]
    if variables:
        parts.append("Variables:\n" + "\n".join(variables))
    if tried:
        parts.append("Already tried, and still failing:\n" + "\n".join(f"- {t}" for t in tried[-MAX_TRIED:]))
    if kind == "line" and k is not None:
        parts.append(f"Write line {k} corrected so the cell runs without error. Reply with that line only.")
        max_tokens = 200
    else:
        parts.append("Write the whole cell corrected so that it runs without error.")
        max_tokens = min(1500, 100 + len(source) // 2)
    return FocusedAsk(ask=kind, temperature=temperature, max_tokens=max_tokens,
                      messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}])


def candidate(source: str, reply: str, failing_line: int | None) -> str | None:
    """The cell with the reply's code merged in, or None when the reply has no code to merge."""
    code = reply_code(reply)
    return merge_reply(source, code, failing_line) if code.strip() else None


def subject(failing_line: int | None, target: int) -> str:
    return f"line {failing_line} of cell {target}" if failing_line else f"cell {target}"


def changed_lines(old: str, new: str, limit: int = 2) -> str:
    """The lines `new` changed or added, quoted (at most `limit`, each cut to 160 characters)."""
    a, b = old.splitlines(), new.splitlines()
    changed = [line.strip() for op, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
               if op in ("replace", "insert") for line in b[j1:j2] if line.strip()]
    quoted = [f"`{x[:160]}`" for x in changed[:limit]]
    more = f" (+{len(changed) - limit} lines)" if len(changed) > limit else ""
    return ", ".join(quoted) + more if quoted else "the same code"

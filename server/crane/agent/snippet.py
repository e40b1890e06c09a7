"""Merging a model's code reply into a cell: the reply may be the corrected failing line, a few lines around it, or
the whole cell with some lines left out; the cell that results keeps every line the reply did not change.

Small models asked for "the corrected line" often send the lines after it too, unindented, and asked for "the
corrected cell" often drop a line or two (Qwen2.5-Coder-0.5B's corrected confusion-matrix cell left out the
`cm_display.plot()` that raised). So a reply is aligned with the cell line by line (blank space aside):
- lines it shares with the cell anchor it; a reply line between anchors replaces the cell line most like it;
- lines the reply leaves out are kept (leaving out is not deleting);
- a reply with no line in common with the cell replaces the failing line;
- each reply line takes the indentation of the line it replaces (its own indentation relative to its first line).
"""

from __future__ import annotations

import difflib
import re

_FENCED = re.compile(r"```[ \t]*(?:python|py|ipython|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
SIMILAR = 0.5  # a reply line replaces the cell line most like it when at least this alike (`_alike`)


def reply_code(text: str) -> str:
    """The code of a reply: its first fenced block, or else the longest start of it that is Python ("" for prose:
    a sentence is not code); prose after the code is cut."""
    from crane.agent.guard import parse_cell

    m = _FENCED.search(text)
    lines = (m.group(1) if m else text).strip("\n").splitlines()
    if parse_cell("\n".join(lines)) is None:
        lines = next((lines[:k] for k in range(len(lines) - 1, 0, -1) if parse_cell("\n".join(lines[:k])) is not None),
                     lines if m else [])
    return "\n".join(lines).rstrip()


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _reindent(block: list[str], base: str) -> list[str]:
    """`block` moved to indentation `base`, its lines' indentation relative to its least indented line kept."""
    widths = [len(_indent(x)) for x in block if x.strip()]
    cut = min(widths, default=0)
    return [base + x[cut:] if x.strip() else "" for x in block]


def _norm(line: str) -> str:
    return " ".join(line.split())


def _alike(old: str, new: str) -> float:
    """How alike two lines are: the mean of difflib's ratio and the share of the shorter line in their longest
    common run (`cm_display.plot()` and `cm_display.plot(cmap=plt.cm.Blues)` are alike; their ratio alone is low)."""
    a, b = _norm(old), _norm(new)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    run = sm.find_longest_match(0, len(a), 0, len(b)).size
    return (sm.ratio() + run / max(1, min(len(a), len(b)))) / 2


def _replace_block(old: list[str], new: list[str]) -> list[str]:
    """A run of reply lines `new` standing where the cell has `old` (no line in common): equal lengths replace line
    for line; fewer reply lines replace the cell lines most like them (in order) and keep the others; more reply
    lines replace the run."""
    base = next((_indent(x) for x in old if x.strip()), "")
    if len(new) >= len(old):
        if len(new) == len(old):
            return [_reindent([n], _indent(o))[0] if n.strip() else o for o, n in zip(old, new, strict=True)]
        return _reindent(new, base)
    out = list(old)
    start = 0
    for n in new:
        if not n.strip():
            continue
        scores = [(_alike(o, n), i) for i, o in enumerate(old) if i >= start and o.strip()]
        if not scores:
            break
        best, i = max(scores)
        if best < SIMILAR:
            continue
        out[i] = _reindent([n], _indent(old[i]))[0]
        start = i + 1
    return out


def merge_reply(source: str, reply: str, failing_line: int | None) -> str | None:
    """The cell `source` with the code `reply` merged in (see the module's docstring), or None when the reply has no
    code or, having no line in common with the cell, no failing line to replace."""
    cell = source.splitlines()
    new = [x.rstrip() for x in reply.splitlines()]
    while new and not new[0].strip():
        new.pop(0)
    while new and not new[-1].strip():
        new.pop()
    if not new:
        return None
    a, b = [_norm(x) for x in cell], [_norm(x) for x in new]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    anchored = any(a[blk.a] and blk.size for blk in sm.get_matching_blocks() if blk.size)
    if not anchored:
        if failing_line is None or not 1 <= failing_line <= len(cell):
            return None
        k = failing_line - 1
        out = cell[:k] + _reindent(new, _indent(cell[k])) + cell[k + 1:]
        return "\n".join(out)
    out = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op in ("equal", "delete"):
            out += cell[i1:i2]
        elif op == "insert":
            nxt = next((cell[i] for i in range(i1, len(cell)) if cell[i].strip()), "")
            prev = next((cell[i] for i in range(i1 - 1, -1, -1) if cell[i].strip()), "")
            base = _indent(prev) + ("    " if prev.rstrip().endswith(":") else "") if prev else _indent(nxt)
            out += _reindent(new[j1:j2], base)
        else:
            out += _replace_block(cell[i1:i2], new[j1:j2])
    return "\n".join(out)

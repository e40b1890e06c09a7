"""Merging a model's code reply into a cell: the reply may be the corrected failing line, a few lines around it, or
the whole cell with some lines left out; the cell that results keeps every line the reply did not change.

Small models asked for "the corrected line" often send the lines after it too, unindented, and asked for "the
corrected cell" often drop a line or two (Qwen2.5-Coder-0.5B's corrected confusion-matrix cell left out the
`cm_display.plot()` that raised). So a reply is aligned with the cell line by line (blank space aside):
- lines it shares with the cell anchor it; between anchors a reply line replaces the cell line most like it (in
  order, when alike enough), and a reply line like none is inserted (before the next cell line it replaces, or
  before the next anchor) — it never overwrites an unrelated line;
- lines the reply leaves out are kept (leaving out is not deleting);
- a reply with no line in common with the cell replaces the failing line;
- indentation: the reply's own, shifted by the offset measured on the nearest anchor (a reply sent unindented
  from inside a loop goes back into the loop); with no anchor, the failing line's.
"""

from __future__ import annotations

import difflib
import re

_FENCE = re.compile(r"^\s*```+\s*([\w+-]*)\s*$")
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
PY_LANGS = {"", "python", "py", "python3", "ipython", "ipython3"}
SIMILAR = 0.5  # a reply line replaces the cell line most like it when at least this alike (`_alike`)


def _blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of a reply: (language, code); an unclosed last block runs to the end."""
    out: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        m = _FENCE.match(line)
        if lang is None:
            if m:
                lang, body = m.group(1).lower(), []
        elif m and not m.group(1):
            out.append((lang, "\n".join(body)))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        out.append((lang, "\n".join(body)))
    return out


def reply_code(text: str) -> str:
    """The code of a reply (a reasoning model's <think> part left out): its first Python (or untagged) fenced block,
    or else the longest start of it that is Python ("" for prose: a sentence is not code); prose after the code is
    cut."""
    from crane.agent.guard import parse_cell

    text = _THINK.sub("", text).strip()
    if "\n" not in text and len(text) > 2 and text[0] == text[-1] == "`":  # one line as inline code
        text = text.strip("`")
    fenced = [code for lang, code in _blocks(text) if lang in PY_LANGS]
    lines = (fenced[0] if fenced else text).strip("\n").splitlines()
    if parse_cell("\n".join(lines)) is None:
        lines = next((lines[:k] for k in range(len(lines) - 1, 0, -1) if parse_cell("\n".join(lines[:k])) is not None),
                     lines if fenced else [])
    return "\n".join(lines).rstrip()


def _width(line: str) -> int:
    return len(line) - len(line.lstrip())


def _shift(line: str, offset: int) -> str:
    """`line` with its indentation moved by `offset` columns (never below 0)."""
    if not line.strip():
        return ""
    return " " * max(0, _width(line) + offset) + line.lstrip()


def _reindent(block: list[str], base: str) -> list[str]:
    """`block` moved to indentation `base`, its lines' indentation relative to its least indented line kept."""
    widths = [_width(x) for x in block if x.strip()]
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


def _between(old: list[str], new: list[str], offset: int, failing: int | None) -> list[str]:
    """Reply lines `new` standing where the cell has `old` (no line in common): each reply line replaces the first
    cell line after the previous one's that is alike enough; the others replace the failing line (`failing`, an
    index into `old`) when it lies before the next replaced line and nothing replaced it, else are inserted there
    (or after the run); cell lines nothing replaced stay."""
    matched: dict[int, int] = {}  # reply line -> cell line
    start = 0
    for j, n in enumerate(new):
        if not n.strip():
            continue
        best = max(((_alike(o, n), i) for i, o in enumerate(old) if i >= start and o.strip()), default=None)
        if best is not None and best[0] >= SIMILAR:
            matched[j] = best[1]
            start = best[1] + 1
    taken = set(matched.values())

    def place(lo: int, hi: int, lines: list[str]) -> list[str]:
        if lines and failing is not None and lo <= failing < hi and failing not in taken:
            return old[lo:failing] + lines + old[failing + 1:hi]
        return old[lo:hi] + lines

    out: list[str] = []
    pending: list[str] = []
    i = 0
    for j, n in enumerate(new):
        if j not in matched:
            pending.append(_shift(n, offset))
            continue
        k = matched[j]
        out += place(i, k, pending) + [_shift(n, offset)]
        pending, i = [], k + 1
    return out + place(i, len(old), pending)


def _offsets(cell: list[str], new: list[str], blocks) -> list[tuple[int, int]]:
    """(cell line, offset) for each anchor line: the cell's indentation minus the reply's there."""
    return [(b.a + t, _width(cell[b.a + t]) - _width(new[b.b + t]))
            for b in blocks for t in range(b.size) if cell[b.a + t].strip()]


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
    blocks = [blk for blk in sm.get_matching_blocks() if blk.size]
    anchors = _offsets(cell, new, blocks)
    if not anchors:
        if failing_line is None or not 1 <= failing_line <= len(cell):
            return None
        k = failing_line - 1
        indent = cell[k][: _width(cell[k])]
        return "\n".join(cell[:k] + _reindent(new, indent) + cell[k + 1:])

    def offset_at(i: int) -> int:
        before = [off for line, off in anchors if line < i]
        return before[-1] if before else anchors[0][1]

    out: list[str] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op in ("equal", "delete"):
            out += cell[i1:i2]
        elif op == "insert":
            out += [_shift(x, offset_at(i1)) for x in new[j1:j2]]
        else:
            failing = failing_line - 1 - i1 if failing_line is not None else None
            out += _between(cell[i1:i2], new[j1:j2], offset_at(i1), failing)
    return "\n".join(out)

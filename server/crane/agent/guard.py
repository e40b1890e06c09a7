"""The fix guard: refuse edits that hide a crash instead of fixing it, by comparing the ASTs of a cell's
original and proposed source.

Refused, with the reason sent back to the agent:
- emptying a cell (no statement left, or only `pass` / `...` / comments);
- adding a `try` with `except` handlers, or `contextlib.suppress(...)`, that the original did not have;
- disabling code with a new `if False:` / `if 0:` block;
- deleting the failing statement (or replacing it with `pass`), when the failing line is known;
- commenting out code (a statement of the original reappears in a comment of the proposal);
- replacing a cell that parses with text that does not (an error message, "new source of cell 7: ...");
- replacing a cell with unrelated code: no statement kept, no name in common, little text in common.

Enforced twice: on every `edit_cell` (the edit is not applied) and on the final proposal's diff.
"""

from __future__ import annotations

import ast
import copy
import difflib
import re

from crane import pyast
from crane.analysis.bindings import TRY_NODES
from crane.analysis.transform import transform

_BODY_FIELDS = ("body", "orelse", "handlers", "finalbody", "cases")


def parse_cell(source: str) -> ast.Module | None:
    """A cell's code as the kernel runs it (IPython syntax transformed), parsed; None when it is not Python (a
    syntax error, or a null byte: a ValueError before Python 3.12)."""
    python, _, _ = transform(source)
    try:
        return pyast.parse(python)
    except (SyntaxError, ValueError):
        return None


def _header(node: ast.stmt) -> str:
    """A statement's identity: the whole simple statement, or a compound statement's header only."""
    if any(hasattr(node, f) for f in _BODY_FIELDS):
        node = copy.copy(node)
        for f in _BODY_FIELDS:
            if hasattr(node, f):
                setattr(node, f, [])
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _statements(tree: ast.Module) -> list[ast.stmt]:
    out: list[ast.stmt] = []

    def visit(stmts):
        for s in stmts:
            out.append(s)
            for f in _BODY_FIELDS:
                child = getattr(s, f, None)
                if isinstance(child, list):
                    for c in child:
                        if isinstance(c, ast.stmt):
                            visit([c])
                        elif hasattr(c, "body"):  # except handlers, match cases
                            visit(c.body)

    visit(tree.body)
    return out


def _trivial(node: ast.stmt) -> bool:
    return isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


def _try_signatures(tree: ast.Module) -> list[str]:
    sigs = []
    for node in ast.walk(tree):
        if isinstance(node, TRY_NODES) and node.handlers:
            sigs.append(ast.dump(node, include_attributes=False))
    return sigs


def _suppress_count(tree: ast.Module) -> int:
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                f = item.context_expr.func if isinstance(item.context_expr, ast.Call) else None
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name == "suppress":
                    n += 1
    return n


def _disabled_blocks(tree: ast.Module) -> int:
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.test, ast.Constant)
               and not n.test.value)


def _comment_text(source: str) -> str:
    lines = []
    for ln in source.splitlines():
        m = re.search(r"#(.*)$", ln)
        if m:
            lines.append(m.group(1).strip())
    return "\n".join(lines)


def _first_line(python: str, node: ast.stmt) -> str:
    seg = ast.get_source_segment(python, node) or ""
    return seg.splitlines()[0].strip() if seg else ""


def _core(python: str, node: ast.stmt) -> str:
    """What a statement computes: an assignment's value, else the statement itself (first line)."""
    value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr,
                                                                  ast.Return)) else None
    if isinstance(value, ast.expr):
        seg = ast.get_source_segment(python, value) or ""
        return seg.splitlines()[0].strip() if seg else ""
    return _first_line(python, node)


_WORD = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|'[^']*'|\"[^\"]*\"")


def _words(text: str) -> list[str]:
    """The names, numbers and strings of a line of code, in order (no operators or brackets)."""
    return _WORD.findall(text)


def _kinship(old: str, new: str) -> float:
    """How much of the failing statement `old` lives on in `new`: the lower of their similarity by characters and
    the share of `old`'s names, numbers and strings that `new` keeps, in order (by characters alone,
    `sns.violinplot(df, x='species')` and `df.dropna().drop_duplicates()` look a third alike; the second keeps one
    word of five, `df`). A share, not a ratio of both: a fix may add many words (`pd.to_numeric(...,
    errors='coerce')` around `df['installs']`)."""
    words = _words(old)
    kept = sum(b.size for b in difflib.SequenceMatcher(a=words, b=_words(new), autojunk=False).get_matching_blocks())
    return min(difflib.SequenceMatcher(a=old, b=new).ratio(), kept / len(words) if words else 1.0)


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _failing_statement(stmts: list[ast.stmt], line: int, line_map: list[int]) -> int | None:
    """Index of the innermost statement spanning original line `line`."""
    best = None
    for i, s in enumerate(stmts):
        first = line_map[s.lineno - 1] if s.lineno - 1 < len(line_map) else s.lineno
        end = s.end_lineno or s.lineno
        last = line_map[end - 1] if end - 1 < len(line_map) else end
        if first <= line <= last:
            best = i  # statements are in pre-order: later spans are nested deeper
    return best


def _names(tree: ast.Module) -> set[str]:
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return out


def _unrelated(old_tree: ast.Module, new_tree: ast.Module, old_keys: list[str], new_keys: list[str],
               python_old: str, python_new: str) -> bool:
    """The proposal shares nothing with the original: no statement, no name, and under a third of its text."""
    if set(old_keys) & set(new_keys):
        return False
    old_names, new_names = _names(old_tree), _names(new_tree)
    if not old_names or old_names & new_names:
        return False
    return difflib.SequenceMatcher(a=_norm(python_old), b=_norm(python_new), autojunk=False).ratio() < 0.34


def check_edit(original: str, proposed: str, failing_line: int | None = None) -> str | None:
    """The reason the edit is refused, or None when it is acceptable."""
    old_tree, new_tree = parse_cell(original), parse_cell(proposed)
    if old_tree is None:
        return None  # the original does not parse: any edit that makes it parse is a fix attempt
    old_stmts = _statements(old_tree)
    if not old_stmts:
        return None
    if new_tree is None:
        return ("refused: the new source is not valid Python (a syntax error), while the cell's code is. Send the "
                "cell's complete corrected code as `source`, nothing else.")
    new_stmts = _statements(new_tree)
    if not new_stmts or all(_trivial(s) for s in new_tree.body):
        return ("refused: the edit deletes the cell's code. Fix the cause of the error instead of removing the "
                "code that raises it.")
    if len(_try_signatures(new_tree)) > len(_try_signatures(old_tree)):
        return ("refused: the edit adds a try/except, which hides the exception instead of fixing its cause. "
                "Change the code so that it does not raise.")
    if _suppress_count(new_tree) > _suppress_count(old_tree):
        return ("refused: the edit adds contextlib.suppress, which hides the exception instead of fixing its "
                "cause. Change the code so that it does not raise.")
    if _disabled_blocks(new_tree) > _disabled_blocks(old_tree):
        return "refused: the edit disables code with an always-false `if`. Fix the cause of the error instead."

    python_old, line_map, _ = transform(original)
    old_keys = [_header(s) for s in old_stmts]
    new_keys = [_header(s) for s in new_stmts]
    if _unrelated(old_tree, new_tree, old_keys, new_keys, python_old, transform(proposed)[0]):
        return ("refused: the edit replaces the cell's code with unrelated code (no statement kept, no name in "
                "common). Fix the cell's own code so that it runs.")
    kept = set(new_keys)
    comments = _norm(_comment_text(proposed)) if "#" in proposed else ""
    if comments:
        orig_comments = _norm(_comment_text(original))
        for s, key in zip(old_stmts, old_keys, strict=False):
            if key in kept or _trivial(s):
                continue
            seg = ast.get_source_segment(python_old, s) or ""
            first_line = seg.splitlines()[0] if seg else ""
            text = _norm(first_line)
            if len(text) >= 6 and text in comments and text not in orig_comments:
                return (f"refused: the edit comments out `{first_line.strip()[:80]}`. Commenting out code that "
                        "raises is not a fix: change it so that it works.")

    if failing_line is None:
        return None
    idx = _failing_statement(old_stmts, failing_line, line_map)
    if idx is None:
        return None
    failing_src = (ast.get_source_segment(python_old, old_stmts[idx]) or "").splitlines()
    failing_text = failing_src[0].strip() if failing_src else ""
    sm = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if not i1 <= idx < i2:
            continue
        if tag == "equal":
            return None
        replacement = new_stmts[j1:j2]
        if tag == "delete" or all(_trivial(s) for s in replacement):
            return (f"refused: the edit deletes the failing statement `{failing_text[:80]}` (line {failing_line}). "
                    "Fix it so that it runs instead of removing it.")
        # is the failing statement still there in an edited form, or was it swapped for a stub?
        python_new, _, _ = transform(proposed)
        core = _core(python_old, old_stmts[idx])
        ratios = [_kinship(core, _core(python_new, s)) for s in replacement]
        if not ratios or max(ratios) < 0.3:
            return (f"refused: the edit replaces the failing statement `{failing_text[:80]}` (line {failing_line}) "
                    "with unrelated code. Fix it so that it runs instead of removing it.")
        return None
    return None

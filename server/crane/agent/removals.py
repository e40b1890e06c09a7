"""What an edit removes: keyword and positional arguments of calls it keeps, and whole statements — so that a
proposal says so in its title ("drops `ax=ax[index]`") instead of removing code silently. Pure (AST of the
old and new sources); used by crane.agent.proposal and crane.fixes.search. Runs in the daemon and the CLI."""

from __future__ import annotations

import ast
import difflib

from crane.agent.guard import parse_cell

MAX_SHOWN = 60


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _calls(tree: ast.AST) -> dict[str, list[ast.Call]]:
    out: dict[str, list[ast.Call]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            out.setdefault(ast.unparse(n.func), []).append(n)
    return out


def _statements(tree: ast.AST) -> list[str]:
    return [ast.unparse(s) for s in ast.walk(tree) if isinstance(s, ast.stmt)
            and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If,
                                   ast.With, ast.Try))]


def removed_parts(old: str, new: str) -> list[str]:
    """`kw=value`, positional arguments and statements of `old` that `new` no longer has (as short code)."""
    a, b = parse_cell(old), parse_cell(new)
    if a is None or b is None:
        return []
    out: list[str] = []
    new_calls = _calls(b)
    for func, calls in _calls(a).items():
        kept = new_calls.get(func)
        if not kept:
            continue  # the call itself changed or went: the statement check below says so
        new_kw = {(k.arg, ast.unparse(k.value)) for c in kept for k in c.keywords}
        new_kw_names = {k.arg for c in kept for k in c.keywords}
        most_args = max(len(c.args) for c in kept)
        for c in calls:
            for k in c.keywords:
                if k.arg is not None and k.arg not in new_kw_names and (k.arg, ast.unparse(k.value)) not in new_kw:
                    out.append(f"{k.arg}={ast.unparse(k.value)}")
            if len(c.args) > most_args:
                kept_args = {ast.unparse(x) for k in kept for x in k.args}
                out += [ast.unparse(x) for x in c.args if ast.unparse(x) not in kept_args][: len(c.args) - most_args]
    # statements: matched in order; those the new source has no counterpart for (not rewritten in place) are gone
    old_stmts, new_stmts = _statements(a), _statements(b)
    matcher = difflib.SequenceMatcher(a=old_stmts, b=new_stmts, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "delete":
            out += old_stmts[i1:i2]
        elif tag == "replace" and i2 - i1 > j2 - j1:
            rest = old_stmts[i1:i2]
            same = set(new_stmts[j1:j2])
            out += [x for x in rest if x not in same][: (i2 - i1) - (j2 - j1)]
    return [_short(x) for x in dict.fromkeys(out)]


def removal_note(old: str, new: str) -> str:
    """"drops `ax=ax[index]`" (and the others), or "" when the edit removes nothing."""
    parts = removed_parts(old, new)
    if not parts:
        return ""
    shown = ", ".join(f"`{p}`" for p in parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    return f"drops {shown}"

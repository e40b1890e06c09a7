"""What the kernel's Python says, where CPython's versions word an exception differently (runs in the daemon).

A prediction names the exception and message the kernel will show, and the kernel's interpreter is not the
daemon's: the probe reports it (`ProbeResult.libraries["python"]`, the kernel's `sys.version`); without a kernel
(static mode) the daemon's own Python stands in. Differences the rules produce, checked against real kernels of
each version (tests/rules/test_python_versions.py):

- 3.13 adds ". Did you mean 'x'?" to a Python function's "got an unexpected keyword argument" TypeError, the
  closest of its keyword-capable parameters by CPython's suggestion distance (`cpython_suggestion`, the algorithm
  of Python/suggestions.c, written out: the standard library's copy is private);
- IPython compiles a cell with `codeop`'s flags, so a cell that ends inside an open bracket, string or block is
  "incomplete input": a SyntaxError up to 3.12, the SyntaxError subclass `_IncompleteInputError` from 3.13.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# Python/suggestions.c
_MAX_CANDIDATE_ITEMS = 750
_MAX_STRING_SIZE = 40
_MOVE_COST = 2
_CASE_COST = 1


def parse_version(text: str | None) -> tuple[int, int] | None:
    """"3.13.0" (or "3.13.0rc1", "3.14.0a1+") -> (3, 13); None where it is not a version."""
    parts = (text or "").split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        return None


def kernel_python(ctx: object) -> tuple[int, int]:
    """The (major, minor) of the kernel's Python: the probe's report, else the daemon's own."""
    probe = getattr(ctx, "probe", None)
    found = parse_version(probe.libraries.get("python")) if probe is not None else None
    return found or (sys.version_info[0], sys.version_info[1])


def _substitution_cost(a: int, b: int) -> int:
    if (a & 31) != (b & 31):
        return _MOVE_COST
    if a == b:
        return 0
    if 65 <= a <= 90:
        a += 32
    if 65 <= b <= 90:
        b += 32
    return _CASE_COST if a == b else _MOVE_COST


def _levenshtein(a: bytes, b: bytes, max_cost: int) -> int:
    """CPython's weighted distance (case changes cost 1, other edits 2), or `max_cost + 1` once it is beyond."""
    while a and b and a[0] == b[0]:
        a, b = a[1:], b[1:]
    while a and b and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    if not a or not b:
        return (len(a) + len(b)) * _MOVE_COST
    if len(a) > _MAX_STRING_SIZE or len(b) > _MAX_STRING_SIZE:
        return max_cost + 1
    if len(b) < len(a):
        a, b = b, a
    if (len(b) - len(a)) * _MOVE_COST > max_cost:
        return max_cost + 1
    row = [(i + 1) * _MOVE_COST for i in range(len(a))]
    result = 0
    for b_index, code in enumerate(b):
        distance = result = b_index * _MOVE_COST
        minimum = sys.maxsize
        for index, char in enumerate(a):
            substitute = distance + _substitution_cost(code, char)
            distance = row[index]
            result = min(min(result, distance) + _MOVE_COST, substitute)
            row[index] = result
            minimum = min(minimum, result)
        if minimum > max_cost:
            return max_cost + 1
    return result


def cpython_suggestion(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate CPython's "Did you mean" names for `name` (its first closest, within a third of the
    characters), or None."""
    if len(candidates) >= _MAX_CANDIDATE_ITEMS:
        return None
    raw = name.encode("utf-8", "surrogatepass")
    best: str | None = None
    best_distance = sys.maxsize
    for item in candidates:
        if item == name:
            continue
        encoded = item.encode("utf-8", "surrogatepass")
        max_distance = min((len(raw) + len(encoded) + 3) * _MOVE_COST // 6, best_distance - 1)
        distance = _levenshtein(raw, encoded, max_distance)
        if distance > max_distance:
            continue
        if best is None or distance < best_distance:
            best, best_distance = item, distance
    return best


def unexpected_keyword(fname: str, keyword: str, keyword_params: Sequence[str], python: tuple[int, int]) -> str:
    """A Python function's unexpected-keyword TypeError message on `python`; `keyword_params` are the names a
    keyword may bind (positional-or-keyword, then keyword-only, in order)."""
    message = f"{fname}() got an unexpected keyword argument '{keyword}'"
    if python >= (3, 13):
        suggestion = cpython_suggestion(keyword, keyword_params)
        if suggestion is not None:
            message += f". Did you mean '{suggestion}'?"
    return message


def incomplete_input_ename(python: tuple[int, int]) -> str:
    """The exception a kernel on `python` raises for a cell that ends inside an open construct."""
    return "_IncompleteInputError" if python >= (3, 13) else "SyntaxError"

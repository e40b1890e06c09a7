"""Converting between Python source, AST objects and code, one thread at a time.

CPython 3.11 keeps the recursion-depth bookkeeping of its AST conversions (C structures <-> `ast` objects) in
per-interpreter state, so two threads converting at once can fail with `SystemError: AST constructor recursion
depth mismatch` (python/cpython#106905; fixed in 3.12). The daemon analyses cells on worker threads while its
kernel threads decode private replies with `literal_eval`: every such conversion in CRANE goes through this
lock. (Walking or `unparse`-ing an existing tree, or `literal_eval` of a node, converts nothing.)
"""

from __future__ import annotations

import ast
import threading
from types import CodeType
from typing import Any

_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>", flags: int = 0) -> ast.Module:
    """`ast.parse(source, filename)` (with extra compiler `flags`): raises SyntaxError like it."""
    with _LOCK:
        tree = compile(source, filename, "exec", flags | ast.PyCF_ONLY_AST, dont_inherit=True)
    assert isinstance(tree, ast.Module)
    return tree


def compile_tree(tree: ast.Module, filename: str, mode: str = "exec", flags: int = 0) -> CodeType:
    """Compile an AST (its later passes find errors the parser does not: `return` outside a function...)."""
    with _LOCK:
        return compile(tree, filename, mode, flags=flags, dont_inherit=True)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval` of source text."""
    with _LOCK:
        tree = compile(text.lstrip(" \t"), "<unknown>", "eval", ast.PyCF_ONLY_AST, dont_inherit=True)
    return ast.literal_eval(tree)

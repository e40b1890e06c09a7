"""The private names (`_x`, not dunder) a standard-library class and its bases have on the interpreter that runs
this: class attributes (`dir`) and instance attributes its source sets or reads on `self` (Python 3.13's
`Thread._handle` is one, set in `__init__`, so `dir(Thread)` does not show it).

Standard library only: tests/architecture/test_stdlib_subclasses.py imports it for the running interpreter and
runs it as a script on every other supported interpreter the machine has:
`python stdlib_private_names.py threading:Thread socketserver:TCPServer` prints {"threading:Thread": [...], ...}.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
import textwrap


def is_private(name: str) -> bool:
    """`_x`: private by convention (dunders are protocol, `__x` is mangled per class)."""
    return name.startswith("_") and not name.startswith("__")


def self_attributes(cls: type) -> set[str]:
    """Every `self.<name>` its own source sets or reads (empty where the class has no Python source)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return set()
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"}


def private_names(cls: type) -> set[str]:
    """The private names of `cls` and every base of it, on this interpreter."""
    names = set(dir(cls))
    for klass in cls.__mro__:
        if klass is not object:
            names |= self_attributes(klass)
    return {name for name in names if is_private(name)}


def resolve(spec: str) -> type | None:
    """`module:Qual.Name` -> the class, or None where this interpreter does not have it."""
    module, _, qualname = spec.partition(":")
    try:
        obj: object = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) else None


def main(specs: list[str]) -> None:
    out = {}
    for spec in specs:
        cls = resolve(spec)
        out[spec] = sorted(private_names(cls)) if cls is not None else None
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])

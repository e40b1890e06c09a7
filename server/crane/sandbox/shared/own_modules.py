"""The notebook's own modules in the copy (red team round 17h, F2): a module of the notebook's (a `.py` file of its
folder or of its own `sys.path`, not a library) is imported again from its file in the transplant worker, so the
kernel's module state was lost there (`settings.THRESHOLD = 0.9`, `settings.register('a')`: certain false
crashes) and a file edited since the kernel imported it (no autoreload) ran its new code in the copy (a false
clean run of `from utils import helper2`, whose kernel raises ImportError).

Now the kernel's plain data attributes of each such module travel with the state (kernel/own_modules.py: exact
builtin scalars and bounded containers of them, in the namespace's one pickle, so `reg = settings.REGISTRY` is
still the module's list) and are set on the worker's module; and the module's code is compared: the names its
namespace holds and a print of each function and class method it defines (`code_print`: the bytecode, its
constants and names, nested code included). Where the worker's module differs, `module:<name>` is missed
(worker/main), and a verdict of a cell that reads the module or a name it defines is only "likely"
(transplant.state_doubt). Standard library only; `code_print` runs in the kernel on exact code objects (nothing
of the notebook's is called) and in the worker.
"""

from __future__ import annotations

import zlib
from typing import Any

_OM_FUNCTION: Any = type(lambda: 0)  # (the types themselves, not `types`' names: a cell may have rebound those)
_OM_CODE: Any = type((lambda: 0).__code__)
_OM_CRC: Any = zlib.crc32
if type(_OM_CRC) is not type(len) or _OM_CRC.__module__ != "zlib" or _OM_CRC.__name__ != "crc32":
    _OM_CRC = None  # (replaced by a cell before CRANE's install: no print is taken, every module reads as equal)
_OM_SIMPLE = (int, float, complex, str, bytes, bool, type(None))
OWN_MODULES_KEY = "\x00crane-own-modules"  # the state's entry: {module: {name: value}}


def code_print(code: Any, depth: int = 0) -> int:
    """A print of a code object: its bytecode, constants (nested code by its own print) and names, as a CRC (-1
    where it cannot be printed: an int constant past `sys.get_int_max_str_digits`)."""
    if type(code) is not _OM_CODE or depth > 8 or _OM_CRC is None:
        return 0
    parts: list[Any] = [code.co_code, code.co_names, code.co_varnames, code.co_freevars]
    for c in code.co_consts:
        t = type(c)
        if t is _OM_CODE:
            parts.append(code_print(c, depth + 1))
        elif any(t is s for s in _OM_SIMPLE) or (t is tuple and all(any(type(x) is s for s in _OM_SIMPLE) for x in c)):
            parts.append(c)
        else:
            parts.append(t.__name__ if t is frozenset else "?")
    try:
        return _OM_CRC(repr(parts).encode("utf-8", "surrogatepass"))
    except ValueError:
        return -1


def class_print(namespace: Any) -> int:
    """The print of a class: its own namespace's functions' codes, by name (`namespace`: the class's dict, read by
    the kernel's C-level reader, or `vars` in the worker)."""
    if _OM_CRC is None:
        return 0
    prints = sorted((k, code_print(v.__code__)) for k, v in list(namespace.items())  # (the dict's own items: no
                    if type(k) is str and type(v) is _OM_FUNCTION)  # key is hashed or compared)
    return _OM_CRC(repr(prints).encode("utf-8", "surrogatepass"))


def _is_dunder(k: Any) -> bool:
    return type(k) is str and k.startswith("__") and k.endswith("__")


def apply_own_modules(data: Any, prints: Any) -> list[str]:
    """In the worker, once the state is loaded: each of the kernel's own modules (`prints`, env.json's
    `own_modules`) imported here if it is not yet, the kernel's plain data set on it (`data`: the state's
    `OWN_MODULES_KEY` entry), then compared with the kernel's prints; `module:<name>` for each that differs (or
    could not be imported)."""
    import importlib
    import sys

    missed: list[str] = []
    held: dict = {}
    for name, want in (prints or {}).items():  # every module first (a package's namespace then holds its
        if want.get("unread"):  # submodules as the kernel's)
            missed.append(f"module:{name}")
            continue
        try:
            held[name] = vars(sys.modules.get(name) or importlib.import_module(name))
            for k, v in ((data or {}).get(name) or {}).items():
                held[name][k] = v
        except Exception:  # noqa: BLE001 - not imported here: what the cell reads of it is not the kernel's
            missed.append(f"module:{name}")
    for name, ns in held.items():
        want = prints[name]
        try:
            names = [k for k in list(ns) if type(k) is str and not _is_dunder(k)]
            same = len(want["names"]) >= 500 or set(names) == set(want["names"])
            for k, p in want["code"].items():
                v = ns.get(k)
                mine = code_print(v.__code__) if type(v) is _OM_FUNCTION else \
                    class_print(vars(v)) if isinstance(v, type) else None
                same = same and mine == p
        except Exception:  # noqa: BLE001 - (a namespace too odd to compare: not the kernel's, as far as we know)
            same = False
        if not same:
            missed.append(f"module:{name}")
    return missed

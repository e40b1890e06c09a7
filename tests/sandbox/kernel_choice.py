"""Which kernel environments a sandbox test's cells run on (tests/kernel_envs.py's KERNEL_ENVS: IPython 8 and 9).

A worker-side check — a cell run in the portable sandbox's worker, a process of the kernel's interpreter — proves
the same thing on both kernels when the cell uses the standard library alone and both environments run one
interpreter build (one base installation, version and ABI: the same standard library and extension modules, the
same guard and audit hook over them). `kernels(*cells)` then gives the first kernel only; a cell that imports any
other module, imports by a computed name, or uses a name the kernel's setup bound to a library (`library_names`,
e.g. a DataFrame `df`) runs on both, as does everything where the two interpreters differ (or today's is not
built). The kernel itself is still checked unchanged after every run, on each kernel, by the tests' other cells.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache

from ..kernel_envs import KERNEL_ENVS, kernel_python, today_python


@cache
def one_interpreter() -> bool:
    """Both kernel environments run one interpreter build; False where the today environment is not built."""
    today = today_python()
    if today is None:
        return False
    probe = "import sys; print(sys.base_prefix, sys.version, sys.implementation.cache_tag, sys.abiflags)"
    seen = [subprocess.run([exe, "-c", probe], capture_output=True, text=True, timeout=120).stdout
            for exe in (kernel_python(KERNEL_ENVS[0]), today)]
    return bool(seen[0].strip()) and seen[0] == seen[1]


def standard_library_only(source: str, library_names: tuple[str, ...] = ()) -> bool:
    """`source` imports nothing but standard-library modules, nothing by a computed name, and reads none of
    `library_names` (names the kernel's setup bound to a library's objects)."""
    if any(word in source for word in ("__import__", "importlib", "sys.modules")):
        return False
    tree = ast.parse(source)
    tops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            tops.add("" if node.level else (node.module or "").partition(".")[0])
        elif isinstance(node, ast.Name) and node.id in library_names:
            return False
    return tops <= sys.stdlib_module_names


def kernels(*sources: str, library_names: tuple[str, ...] = ()) -> list[str]:
    """The kernels these cells run on: the first where every cell uses the standard library alone and both kernels
    run one interpreter, else both."""
    if all(standard_library_only(s, library_names) for s in sources) and one_interpreter():
        return KERNEL_ENVS[:1]
    return list(KERNEL_ENVS)


@cache
def _library_build(python: str, module: str) -> str:
    """`python`'s interpreter build and the distributions (and versions) that install `module` in its environment;
    "" where `module` is not installed there."""
    probe = ("import importlib.metadata as md, importlib.util as u, sys\n"
             f"name = {module!r}\n"
             "if u.find_spec(name) is None:\n    raise SystemExit\n"
             "dists = sorted(md.packages_distributions().get(name, []))\n"
             "print(sys.base_prefix, sys.version, sys.implementation.cache_tag, sys.abiflags,"
             " [(d, md.version(d)) for d in dists])")
    return subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120).stdout.strip()


def library_kernels(module: str) -> list[str]:
    """The kernels a cell that exercises one library's own code in the worker (`module`: its native writers under the
    guard) runs on: each kernel environment that has `module`, but one only of any two that run one interpreter build
    with the same installed version of it (the worker runs the same code under the same layers for either: torch on
    IPython 8's kernel, not again on IPython 9's); every environment where today's is not built (its tests then skip,
    or fail under CI, as the others do)."""
    if today_python() is None:
        return list(KERNEL_ENVS)
    seen: set[str] = set()
    chosen = []
    for env in KERNEL_ENVS:
        build = _library_build(kernel_python(env), module)
        if build and build not in seen:
            seen.add(build)
            chosen.append(env)
    return chosen

"""The parts of a private kernel module run in one namespace, in order: a top-level name two parts define is
silently the later part's in every earlier part that calls it (`_threads(pid)` of kernel/session.py replaced by
worker/linux.py's `_threads()` in the transplant worker). Each name is defined by one part only, or by several
with the very same source (a shared constant written out twice)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


def _bundles():
    from crane.probe.collect import PROBE_MODULE
    from crane.sandbox.channel import SANDBOX_MODULE
    from crane.sandbox.prewarm import PREWARM_MODULE
    from crane.sandbox.transplant import TRANSPLANT_MODULE, WORKER_MODULE

    return [PROBE_MODULE, SANDBOX_MODULE, TRANSPLANT_MODULE, WORKER_MODULE, PREWARM_MODULE]


def top_level(path: Path) -> dict[str, str]:
    """name -> the source of its top-level definition (functions, classes, assignments; imports left out: an
    import of the same name binds the same object)."""
    text = path.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names = [node.target.id]
        for name in names:
            if name not in ("__all__", "__doc__"):
                out[name] = ast.get_source_segment(text, node) or ""
    return out


def clashes(files: list[Path]) -> list[str]:
    seen: dict[str, tuple[Path, str]] = {}
    bad = []
    for path in files:
        for name, src in top_level(path).items():
            if name in seen and seen[name][1] != src:
                bad.append(f"{name}: {seen[name][0].name} and {path.name}")
            seen.setdefault(name, (path, src))
    return bad


@pytest.mark.parametrize("module", _bundles(), ids=lambda m: m.name)
def test_no_two_parts_of_a_private_module_define_the_same_name(module):
    assert clashes(list(module.files)) == []


def test_a_clash_is_found(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("X = (1, 2)\ndef _threads(pid):\n    return pid\n")
    b.write_text("X = (1, 2)\ndef _threads():\n    return 1\n")
    c.write_text("import os\nY = 3\n")
    assert clashes([a, b, c]) == ["_threads: a.py and b.py"]

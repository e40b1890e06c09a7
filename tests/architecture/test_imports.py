"""The package's import graph: no cycles (type-only imports included), and the daemon's layering.

Static (ast) reading of every module under server/crane: `import crane.x` and `from crane.x import y` lines,
wherever they are (inside functions and `if TYPE_CHECKING:` blocks too), so a cycle that only type checkers
or lazy imports see still counts.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "server"


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "crane").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_daemon_services_do_not_import_the_server():
    """Services see the language server only through `lsp.host.Host`: only handlers (and the registration
    module) may import `crane_server` / `server`."""
    graph = _graph()
    services = ["analysis_service", "diagnostics", "speculation", "llm_bridge", "kernels", "notebook_session",
                "kernel_attach", "kernel_watch", "discovery", "scheduler", "facts_cache", "host", "messages",
                "settings", "notebook_map", "explain", "facts_markdown", "progress", "agent_runs", "quick_fixes",
                "sandbox_thread"]
    for s in services:
        deps = graph.get(f"crane.lsp.{s}", set())
        assert not deps & {"crane.lsp.crane_server", "crane.lsp.server"}, s


def test_core_does_not_import_front_ends():
    """The core (analysis, probe, rules, sandbox, pipeline, policy, kernel, llm, agent) never imports the
    daemon or the CLI."""
    graph = _graph()
    core = [m for m in graph if not m.startswith(("crane.lsp", "crane.commands", "crane.cli", "crane.bench"))
            and m not in ("crane.__main__",)]
    for m in core:
        bad = {d for d in graph[m] if d.startswith(("crane.lsp", "crane.commands", "crane.cli"))}
        assert not bad, (m, bad)


# Where each file runs is the folder it is in: `*/kernel/` runs inside the user's kernel (or its forked child),
# `sandbox/worker/` in the transplant worker, `sandbox/shared/` on both sides; everything else in the daemon.
# `kernel_common/` in the user's kernel as a part of every kernel-side module that needs it.
_COMMON = "crane.kernel_common"
_KERNEL_SIDE = ("crane.probe.kernel", "crane.sandbox.kernel", "crane.sandbox.worker", _COMMON)
_SHARED = "crane.sandbox.shared"
# what each kernel-side folder may import from crane (the rest must be the standard library)
_ALLOWED = {
    "crane.probe.kernel": ("crane.probe.kernel", _COMMON),
    "crane.sandbox.kernel": ("crane.sandbox.kernel", _SHARED, _COMMON),
    "crane.sandbox.worker": ("crane.sandbox.worker", "crane.sandbox.kernel", _SHARED, _COMMON),
    _SHARED: (_SHARED,),
    _COMMON: (_COMMON,),
}


def _folder(module: str) -> str | None:
    for folder in (*_KERNEL_SIDE, _SHARED):
        if module == folder or module.startswith(folder + "."):
            return folder
    return None


# The kernel's own modules, which kernel-side code may use inside a function (never at import): the kernel's
# IPython, and libraries the notebook already loaded (`sys.modules` is checked first).
_KERNEL_HOST = ("IPython", "traitlets", "torch")


def _imports(path: Path, top_level_only: bool = False) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)] if top_level_only else ast.walk(tree)
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def _stdlib(name: str) -> bool:
    import sys

    top = name.split(".")[0]
    return top in sys.stdlib_module_names or top == "__future__"


def test_kernel_worker_and_shared_files_import_only_the_standard_library_and_their_allowed_siblings():
    """At import: the standard library and the allowed sibling folders (marked `# kernel: strip`); inside a
    function also the kernel's own modules (`_KERNEL_HOST`). Never a package of the daemon's environment."""
    bad = []
    for name, path in _modules().items():
        folder = _folder(name)
        if folder is None:
            continue
        top = set(_imports(path, top_level_only=True))
        for imported in _imports(path):
            if imported.startswith("crane"):
                if not any(imported == ok or imported.startswith(ok + ".") for ok in _ALLOWED[folder]):
                    bad.append((name, imported))
            elif not _stdlib(imported) and (imported in top or imported.split(".")[0] not in _KERNEL_HOST):
                bad.append((name, imported))
    assert bad == []


def test_no_daemon_file_imports_a_kernel_or_worker_file():
    bad = []
    for name, path in _modules().items():
        if _folder(name) is not None:
            continue
        for imported in _imports(path):
            if any(imported == k or imported.startswith(k + ".") for k in _KERNEL_SIDE):
                bad.append((name, imported))
    assert bad == []


def test_kernel_module_parts_are_exactly_the_kernel_side_folders():
    """Every file of a kernel-side folder travels in a private module, and every part comes from one."""
    import crane
    from crane.probe.collect import PROBE_MODULE
    from crane.sandbox.channel import SANDBOX_MODULE
    from crane.sandbox.prewarm import PREWARM_MODULE
    from crane.sandbox.transplant import TRANSPLANT_MODULE, WORKER_MODULE

    def inside(paths, root: Path) -> set[str]:
        """The paths under `root`, relative to it (the package may be imported from another checkout than the
        one read here: compare what is shipped by its place in the package)."""
        root = root.resolve()
        return {p.resolve().relative_to(root).as_posix() for p in paths if root in p.resolve().parents}

    shipped = [p for m in (PROBE_MODULE, SANDBOX_MODULE, TRANSPLANT_MODULE, WORKER_MODULE, PREWARM_MODULE)
               for p in m.files]
    shipped_rel = inside(shipped, Path(crane.__file__).parent) | {"sandbox/worker/boot.py"}  # the worker's -c
    crane_root = ROOT / "crane"
    on_disk = inside([p for folder in ("probe/kernel", "sandbox/kernel", "sandbox/worker", "sandbox/shared", "kernel_common")
                      for p in (crane_root / folder).glob("*.py") if p.name != "__init__.py"], crane_root)
    assert on_disk == shipped_rel

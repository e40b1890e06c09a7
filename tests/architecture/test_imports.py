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

"""One-shot verdicts the sandbox tests take on a real kernel, each proved to leave the kernel unchanged.

`PATHS`: the ways a cell is run once, by name — the fork path in each confinement (`blocking`, `layered`), the
transplant path (`transplant`: the blocking layer, as the fork's; `transplant-auto`: its own choice of layer) and
the portable sandbox (`portable`). A test file parametrises over the names it needs
(`@pytest.mark.parametrize("path", ["blocking", "transplant", "portable"])`).

`one_shot(conn, path, source)`: that run inside `Untouched` (kernel/untouched.py: the kernel's namespace, execution
count, history and outputs), asserted unchanged, and the verdict.

`conn`: a module's kernel of each kernel environment (conftest's `env_conn`, IPython 8 and 9) under the name the
tests use; a test file takes it with `from .one_shot import each_kernel  # noqa: F401 (the fixture conn)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.transplant import transplant

PORTABLE = SandboxOptions(confinement="portable")

PATHS: dict[str, Callable[[Any, str, float], Any]] = {
    "blocking": lambda conn, src, budget: speculate(conn, src, budget, layer="blocking"),
    "layered": lambda conn, src, budget: speculate(conn, src, budget, layer="layered"),
    "transplant": lambda conn, src, budget: transplant(conn, src, budget, layer="blocking"),
    "transplant-auto": lambda conn, src, budget: transplant(conn, src, budget),
    "portable": lambda conn, src, budget: speculate(conn, src, budget, sandbox=PORTABLE),
}


def one_shot(conn: Any, path: str, source: str, budget_s: float = 60.0) -> Any:
    """The verdict of `source` run once on `path` (a name of `PATHS`); the kernel asserted unchanged by the run."""
    with Untouched(conn) as watch:
        v = PATHS[path](conn, source, budget_s)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    return v


@pytest.fixture(scope="module", name="conn")
def each_kernel(env_conn):
    """The module's kernel of each kernel environment (IPython 8 and 9), as `conn`."""
    return env_conn

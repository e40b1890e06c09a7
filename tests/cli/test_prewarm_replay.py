"""Issue 45 in the CLI: `crane check --mode auto` replays the notebook with `ReplayedNotebook(prewarm=True)`, which
starts the copy path's worker after the replayed cell that imports the libraries (crane.sandbox.prewarm), so it
imports them while the rest replays; the first verdict takes it warm. Without `prewarm` (the other modes) no worker
is started. The portable sandbox is asked for, so every run needs a worker (pandas stands for TensorFlow)."""

from __future__ import annotations

import os

import pytest

from crane.engine import ReplayedNotebook
from crane.modes import predict_in_mode
from crane.notebook.model import load_notebook
from crane.sandbox.transplant import POOL

from ..sandbox_options import use_options
from .conftest import make_notebook

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux")

CELLS = [("import pandas as pd", 1), ("df = pd.DataFrame({'a': [1, 2, 3]})", 2), ("total = df.a.sum()", None)]


def _workers_of_pid(pid: int) -> list:
    with POOL.lock:
        return [w for (_, k), w in POOL.idle.items() if k is not None and k.pid == pid]


@pytest.mark.parametrize("prewarm", [True, False])
def test_the_replay_starts_the_worker_after_the_import(nb_dir, monkeypatch, prewarm):
    use_options(monkeypatch, confinement="portable")
    nb = load_notebook(make_notebook(nb_dir / "p.ipynb", CELLS))
    with ReplayedNotebook(nb, [2], prewarm=prewarm) as replayed:
        pid = int(replayed.kernel.connection.evaluate("__import__('os').getpid()"))
        workers = _workers_of_pid(pid)
        if not prewarm:
            assert workers == []
            return
        assert len(workers) == 1 and "pandas" in POOL.preloads[workers[0]], workers
        result = predict_in_mode(replayed, 2, "auto", None, 60.0)
        v = result.sandbox
        assert v is not None and v.verdict == "no-crash" and v.transplant is not None and v.transplant.warm, v
        assert v.pid == workers[0].proc.pid

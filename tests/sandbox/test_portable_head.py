"""Heads (worker/head.py): on Linux under Landlock, a warm portable worker serves verdict after verdict, each run in a
fresh fork child of it. Each run starts from the kernel's state alone (nothing a previous run defined, wrote or
started is there), the OS layer is named because it ran, the kernel is unchanged, and the view of the folder the
head staged for the next run follows the real folder (a file made after the staging is seen, one removed is gone).
Real kernels (IPython 8 and 9), the real daemon-side transplant, no mocks."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")


def _idle_of(conn) -> list:
    exe = conn.evaluate("__import__('sys').executable")
    with POOL.lock:
        return [w for k, w in POOL.idle.items() if k[0] == exe]


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_head_serves_each_run_from_a_clean_state(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    (tmp_path / "gone.txt").write_text("x")
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        assert conn.run_cell("import os\nbase = 41").status == "ok"
        before = conn.evaluate("(base, sorted(k for k in globals() if not k.startswith('_')))")
        first = speculate(conn, "leak = base + 1\nopen('made.txt', 'w').write('run 1')\nos.remove('gone.txt')\n"
                                "import threading\nkept = threading.Event()\nleak", 60.0, sandbox=opts)
        assert (first.verdict, first.mode) == ("no-crash", "portable"), first
        assert first.transplant is not None and "landlock" in first.transplant.layers, first.transplant
        heads = _idle_of(conn)
        assert len(heads) == 1 and heads[0].proc.pid == first.pid, (heads, first.pid)  # the same worker waits
        (tmp_path / "new.txt").write_text("after the staging")  # the folder changes between the runs
        (tmp_path / "gone.txt").unlink()
        second = speculate(conn, "print(sorted(n for n in os.listdir('.') if n.endswith('.txt')))\n"
                                 "print('leak' in globals(), 'kept' in globals())\nprint(open('new.txt').read())\n"
                                 "base + 1", 60.0, sandbox=opts)
        assert (second.verdict, second.mode) == ("no-crash", "portable"), second
        assert second.pid == first.pid and second.transplant is not None and second.transplant.warm
        assert "landlock" in second.transplant.layers
        assert second.stdout.split("\n")[:3] == ["['new.txt']", "False False", "after the staging"], second.stdout
        third = speculate(conn, "leak", 60.0, sandbox=opts)  # a name only a previous run defined
        assert (third.verdict, third.ename, third.pid) == ("crash", "NameError", first.pid), third
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".txt") == ["new.txt"]  # nothing written
        assert conn.evaluate("(base, sorted(k for k in globals() if not k.startswith('_')))") == before
    finally:
        kernel.shutdown()
        POOL.shutdown()

"""A kernel CRANE starts that has not answered when `startup_timeout` runs out is reported as slow (KernelTimeout),
not as dead: its liveness is read before CRANE stops it (stopped first, every failed start read "died during
startup (is ipykernel installed there?)", a wrong diagnosis on a loaded machine). One that exits is dead all the
same. Both stand-ins are real processes started by jupyter_client: one that never answers (alive), one that exits."""

from __future__ import annotations

import os
import stat
import sys

import psutil
import pytest

from crane.kernel.errors import KernelDead, KernelTimeout
from crane.kernel.manager import start_kernel

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the stand-in interpreters are shell scripts")


def _interpreter(folder, name: str, body: str) -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _ours(marker: str) -> list[psutil.Process]:
    me = psutil.Process()
    return [p for p in me.children(recursive=True) if marker in " ".join(_cmdline(p))]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_a_kernel_that_never_answers_is_slow_not_dead(tmp_path):
    marker = "crane-never-answers"
    # alive, never answers: the wait always runs out, however fast or slow the machine
    silent = _interpreter(tmp_path, "never-answers", f'exec "{sys.executable}" -c "import time; time.sleep(600)" {marker}')
    with pytest.raises(KernelTimeout, match="did not answer within"):
        start_kernel(tmp_path, python=silent, startup_timeout=1.0)
    # and CRANE stopped it (shutdown_kernel(now=True) waits for the process)
    assert [p for p in _ours(marker) if p.status() != psutil.STATUS_ZOMBIE] == []


def test_a_kernel_that_exits_at_startup_is_dead(tmp_path):
    gone = _interpreter(tmp_path, "crane-exits-at-once", "exit 3")
    with pytest.raises(KernelDead, match="died during startup"):
        start_kernel(tmp_path, python=gone, startup_timeout=600.0)  # the bound ends a failing test only

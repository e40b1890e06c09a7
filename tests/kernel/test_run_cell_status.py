"""`KernelConnection.run_cell` (replay: the truth a bench scores against) says a cell failed when the kernel's reply
does, also where no traceback was shown: a handler of the notebook's (`set_custom_exc`) printed its own, the reply
said `error` and the cell's later names were never bound, yet run_cell said `ok` (round 16, F7's truth runs). Real
kernels, IPython 8 and 9."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python

HANDLER = ("def handled(self, etype, value, tb, tb_offset=None):\n    print('handled')\n"
           "get_ipython().set_custom_exc((ZeroDivisionError,), handled)\n")


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_handled_error_is_still_the_cells_error(tmp_path, kernel_env):
    with start_kernel(tmp_path, python=kernel_python(kernel_env)) as k:
        conn = k.connection
        assert conn.run_cell(HANDLER, timeout=60).status == "ok"
        run = conn.run_cell("rate = 10 / 0", timeout=60)
        assert (run.status, run.ename, run.stdout) == ("error", "ZeroDivisionError", "handled\n"), run
        assert conn.run_cell("print(1)", timeout=60).status == "ok"
        shown = conn.run_cell("1 / 0 if False else {}['k']", timeout=60)  # (a traceback shown: as before)
        assert (shown.status, shown.ename) == ("error", "KeyError") and shown.traceback, shown

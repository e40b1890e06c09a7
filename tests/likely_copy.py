"""The notebook set-up whose crash is only "likely" in a copy of the kernel's state (issue 42, h5), shared by the
tests of every surface that reports it (tests/agent/test_agent_likely_crash.py, tests/cli/test_fix_offline_likely.py,
tests/lsp/test_quick_fixes_likely.py, tests/lsp/test_agent_likely.py, tests/mcp/test_mcp_fixes_likely.py).

`SETUP` makes the kernel refuse the fork (a stand-in `cupy` module), so a speculative run or a fix search runs on a
copy of its state (transplant), and gives `pandas.DataFrame` a property the copy cannot carry: `LIKELY` runs clean in
the kernel and raises AttributeError in the copy, which the copy path judges only likely. `FIX` reads the column.
"""

from __future__ import annotations

SETUP = ("import sys, types\n"
         "sys.modules.setdefault('cupy', types.ModuleType('cupy'))  # the kernel refuses to fork: the run is on a copy\n"
         "import pandas as pd\n"
         "df = pd.DataFrame({'h5_tags': [1, 2, 3]})\n"
         "pd.DataFrame.h5_tag = property(lambda self: 5)  # a library class patched with what the copy cannot carry\n")
LIKELY = "print(df.h5_tag)"  # clean in the kernel, AttributeError in the copy
FIX = "print(df['h5_tags'])"

"""kernel_choice: a cell runs on one kernel only when it uses the standard library alone and both kernel
environments run one interpreter; anything reaching an environment's own libraries runs on both."""

from __future__ import annotations

from ..kernel_envs import KERNEL_ENVS
from .kernel_choice import kernels, one_interpreter, standard_library_only


def test_standard_library_cells_are_told_apart_from_library_cells():
    assert standard_library_only("import os, itertools\nfrom concurrent import futures\nos.getpid()")
    assert standard_library_only("list(map(os.remove, ['x']))")  # SETUP's modules: no import at all
    assert not standard_library_only("import numpy as np\nnp.save('a', np.arange(2))")
    assert not standard_library_only("from pyarrow import fs")
    assert not standard_library_only("import os\nimport psutil.tests")
    assert not standard_library_only("m = __import__('num' + 'py')")
    assert not standard_library_only("import importlib\nimportlib.import_module('polars')")
    assert not standard_library_only("import sys\nsys.modules['pandas']")
    assert not standard_library_only("df.to_csv('/tmp/x')", library_names=("df",))
    assert standard_library_only("os.remove('x')", library_names=("df",))


def test_library_cells_run_on_both_kernels_and_stdlib_ones_on_one_only_where_the_interpreter_is_one():
    assert kernels("import os", "import numpy") == list(KERNEL_ENVS)
    assert kernels("df.head()", library_names=("df",)) == list(KERNEL_ENVS)
    assert kernels("import os", "import sqlite3") == (KERNEL_ENVS[:1] if one_interpreter() else list(KERNEL_ENVS))

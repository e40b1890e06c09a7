"""The notebook's own modules in the copy (red team round 17h, F2; shared/own_modules.py, kernel/own_modules.py):
a module of the notebook's folder was imported again from its file in the worker, so the kernel's module state
was lost (`settings.THRESHOLD = 0.9`, `settings.register('a')`: certain false crashes) and a file edited since
the kernel imported it ran its new code there (`from utils import helper2`: a false clean run; `utils.helper`: a
certain false AttributeError). Now the kernel's plain data attributes travel in the state's one pickle (identity
with the namespace's values kept) and are set on the worker's module, a package's submodule included, and the
module's code is compared with the kernel's: where it differs, a verdict of a cell that reads the module is only
likely. IPython 8 and 9, the six paths; the kernel and the files unchanged (end_paths)."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
COPY_PATHS = [p for p in PATHS if not p.startswith("fork")]
STATE = ("import os, sys\n"
         "open('crane_nb_settings.py', 'w').write('THRESHOLD = 0.5\\nREGISTRY = []\\n"
         "def register(name):\\n    REGISTRY.append(name)\\n')\n"
         "os.makedirs('crane_nb_pkg', exist_ok=True)\nopen('crane_nb_pkg/__init__.py', 'w').write('')\n"
         "open('crane_nb_pkg/sub.py', 'w').write('VALUE = 1\\n')\n"
         "for m in ('crane_nb_settings', 'crane_nb_pkg', 'crane_nb_pkg.sub'):\n    sys.modules.pop(m, None)\n"
         "import crane_nb_settings, crane_nb_pkg.sub\n"
         "crane_nb_settings.THRESHOLD = 0.9\ncrane_nb_settings.register('model_a')\nreg = crane_nb_settings.REGISTRY\n"
         "crane_nb_pkg.sub.VALUE = 3")
STALE = ("import sys\nopen('crane_nb_stale.py', 'w').write('def helper(x):\\n    return x + 1\\n')\n"
         "sys.modules.pop('crane_nb_stale', None)\nimport crane_nb_stale\n"
         "open('crane_nb_stale.py', 'w').write('def helper2(x):\\n    return x + 2000\\n')")  # (another size: see
# test_portable_honest_imports, a same-size rewrite in the import's second is read from the stale bytecode)


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "from crane_nb_settings import THRESHOLD\nassert [p > THRESHOLD for p in (0.6, 0.95)] == [False, True]",
    "assert crane_nb_settings.REGISTRY == ['model_a']",
    "crane_nb_settings.register('b')\nassert reg == ['model_a', 'b']",
    "from crane_nb_pkg.sub import VALUE\nassert VALUE == 3",
], ids=["from-import", "registry", "identity", "submodule"])
def test_the_kernels_module_state_is_the_copys(pk, path, cell):
    assert pk["conn"].run_cell(STATE, timeout=60).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


@pytest.mark.parametrize("path", PATHS)
def test_a_crash_on_carried_module_state_stays_certain(pk, path):
    assert pk["conn"].run_cell(STATE, timeout=60).status == "ok"
    v = path_verdict(pk, path, "assert crane_nb_settings.THRESHOLD == 0.5", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "AssertionError", True), v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell, kernel", [
    ("import crane_nb_stale\nassert crane_nb_stale.helper(1) == 2", ("no-crash", None)),
    ("from crane_nb_stale import helper2", ("crash", "ImportError")),
], ids=["old-code", "new-name"])
def test_a_module_whose_file_changed_is_never_certain_in_the_copy(pk, path, cell, kernel):
    assert pk["conn"].run_cell(STALE, timeout=60).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    if path in COPY_PATHS:
        assert not v.certain and "crane_nb_stale" in (v.reason or ""), v
    else:  # the fork: the kernel's own modules
        assert (v.verdict, v.ename, v.certain) == (*kernel, True), v


ODD = ("import sys\nopen('crane_nb_odd.py', 'w').write('import numpy as np\\nTHRESHOLD = np.float64(0.5)\\n"
       "HANDLERS = {}\\ndef register(f):\\n    HANDLERS[f.__name__] = f\\n    return f\\n"
       "def big():\\n    return 0x' + 'f' * 4000 + '\\n')\n"
       "sys.modules.pop('crane_nb_odd', None)\nimport crane_nb_odd, numpy as np\n"
       "crane_nb_odd.THRESHOLD = np.float64(0.9)\n@crane_nb_odd.register\ndef clean(x):\n    return x + 1")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "assert crane_nb_odd.THRESHOLD > 0.8", "assert crane_nb_odd.HANDLERS['clean'](1) == 2",
], ids=["numpy-scalar", "registry"])
def test_module_state_the_copy_does_not_carry_is_never_certain(pk, path, cell):
    """A module's value that is not plain data (a numpy scalar, a dict of the notebook's functions) is not carried:
    the worker's module has what its file makes, so a cell naming it is only likely on a copy path (red team
    review: certain false crashes). A function with a constant past the int-digits limit prints without failing
    the export."""
    assert pk["conn"].run_cell(ODD, timeout=120).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    if path in COPY_PATHS:
        assert not v.certain and "crane_nb_odd" in (v.reason or ""), v
    else:
        assert (v.verdict, v.certain) == ("no-crash", True), v


@pytest.mark.parametrize("path", COPY_PATHS)
def test_a_cell_naming_nothing_of_the_module_stays_certain(pk, path):
    assert pk["conn"].run_cell(ODD, timeout=120).status == "ok"
    v = path_verdict(pk, path, "assert x == 2", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "AssertionError", True), v


HELPERS = ("def check_stale():\n    import crane_nb_stale\n    return crane_nb_stale.helper(1) == 2\n"
           "def over_threshold():\n    return crane_nb_odd.THRESHOLD > 0.8\n"
           "def through(f):\n    return f()\n"
           "def plain():\n    return 1")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", ["assert check_stale()", "assert through(over_threshold)"], ids=["stale", "uncarried"])
def test_a_module_a_notebook_function_reads_counts_as_the_cells(pk, path, cell):
    """The cell names only a notebook function, which reads the module (its file changed, or a value the copy does
    not carry), itself or through another function: the names the functions the cell reaches read count as the
    cell's (kernel/dynamic_reads `reach`; before, a certain false crash)."""
    assert pk["conn"].run_cell("\n".join((STALE, ODD, HELPERS)), timeout=120).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    if path in COPY_PATHS:
        assert not v.certain and ("crane_nb_stale" if "stale" in cell else "crane_nb_odd") in (v.reason or ""), v
    else:
        assert (v.verdict, v.certain) == ("no-crash", True), v


@pytest.mark.parametrize("path", COPY_PATHS)
def test_a_notebook_function_reading_nothing_of_the_module_stays_certain(pk, path):
    assert pk["conn"].run_cell("\n".join((STALE, ODD, HELPERS)), timeout=120).status == "ok"
    v = path_verdict(pk, path, "assert through(plain) == 2", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "AssertionError", True), v

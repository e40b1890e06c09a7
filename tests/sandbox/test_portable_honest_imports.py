"""Honest cells the portable guard refused (round 16 F11, issue 40): `importlib.reload(utils)` of the notebook's own
module and `importlib.import_module('utils')` were `blocked` ("a call to importlib: importlib.reload is refused"),
and a LightGBM scikit-learn `fit` too ("subprocess.run is refused": loky counts physical cores by running `lscpu`
at its first question). Now `import_module` is what `import` is, a reload of the notebook's own module runs its
source as user code (vetted as the cell's; a library's reload stays refused: test_portable_guard), and the worker
asks loky's question before any guard or OS layer holds it (worker/imports.answer_physical_cores_first). On the six
paths, IPython 8 and 9: the kernel's verdict, a reloaded source that changed is the kernel's verdict, nothing outside
changed."""

from __future__ import annotations

import sys

import pytest

from ..kernel_envs import KERNEL_ENVS, kernel_python
from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
UTILS = ("open('crane_nb_utils.py', 'w').write('def f():\\n    return 1\\n')\nimport importlib, sys\n"
         "sys.modules.pop('crane_nb_utils', None)\nimport crane_nb_utils\n")


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "importlib.reload(crane_nb_utils)\nassert crane_nb_utils.f() == 1",
    "u = importlib.import_module('crane_nb_utils')\nassert u.f() + 1 == 2",
    "import importlib as il\nassert il.reload(crane_nb_utils) is crane_nb_utils",
], ids=["reload", "import_module", "reload-alias"])
def test_the_notebooks_module_reloaded_or_imported_by_name(pk, path, cell):
    assert pk["conn"].run_cell(UTILS, timeout=60).status == "ok"
    v = path_verdict(pk, path, cell, _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PATHS)
def test_a_reloaded_source_that_changed_is_the_kernels_verdict(pk, path):
    """The file changed since the kernel imported it: the reload takes the new `f` (the copy paths import the
    notebook's module from its file, which already is the new one). The new source differs in size: CPython's
    cached bytecode is checked by the source's mtime in whole seconds and its size, so a same-size rewrite within
    the second of the import is reloaded from the stale cache, in the kernel as in the copy (CI's fast runs met
    that). The kernel then runs the cell itself: the verdict is what it does."""
    assert pk["conn"].run_cell(UTILS + "open('crane_nb_utils.py', 'w').write('def f():\\n    return 2000\\n')",
                               timeout=60).status == "ok"
    cell = "importlib.reload(crane_nb_utils)\nassert crane_nb_utils.f() == 1"
    v = path_verdict(pk, path, cell, _served)
    assert (v.verdict, v.ename, v.line) == ("crash", "AssertionError", 2), v
    ran = pk["conn"].run_cell(cell, timeout=60)
    assert (ran.status, ran.ename) == ("error", "AssertionError"), ran


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])  # (LightGBM's pool: no fork)
@pytest.mark.parametrize("kernel_env", [e for e in KERNEL_ENVS if e != "ipython8"])
def test_a_lightgbm_fit_is_decided(tmp_path_factory, kernel_env, path):
    python = kernel_python(kernel_env)
    import subprocess
    if subprocess.run([python, "-c", "import lightgbm"], capture_output=True).returncode:
        pytest.skip("lightgbm is not in this kernel environment")
    from crane.kernel.manager import start_kernel
    work, outside = tmp_path_factory.mktemp("lgb"), tmp_path_factory.mktemp("lgb-outside")
    kernel = start_kernel(work, python=python)
    try:
        conn = kernel.connection
        assert conn.run_cell("import lightgbm as lgb, numpy as np\nx = 1", timeout=180).status == "ok"
        k = {"conn": conn, "work": work, "outside": outside}
        fit = "m = lgb.LGBMClassifier(n_estimators=2, verbose=-1).fit(np.arange(40).reshape(20, 2), [0, 1] * 10)\n"
        v = path_verdict(k, path, fit + "assert m.predict(np.zeros((1, 2))).shape == (1,)", _served)
        assert (v.verdict, v.ename) == ("no-crash", None), v
        v = path_verdict(k, path, fit + "m.predict(np.zeros((1, 3)))", _served)  # (the kernel's crash: 3 features)
        assert (v.verdict, v.ename) == ("crash", "ValueError"), v
    finally:
        kernel.shutdown()


@pytest.mark.parametrize("path", PATHS)
def test_to_sql_into_a_database_of_the_folder(pk, path):
    """(Round 17h F4: `DataFrame.to_sql` was refused outright on the portable path, whatever its connection.) A
    sqlite3 connection and a `sqlite:///` URL write as any write in the working folder on that path does."""
    cell = ("import os, sqlite3, pandas as pd\nos.makedirs('sub', exist_ok=True)\ncon = sqlite3.connect('sub/app.db')\n"
            "pd.DataFrame({'a': [1, 2]}).to_sql('t', con, if_exists='replace', index=False)\n"
            "assert pd.read_sql('select count(*) n from t', con)['n'][0] == 2\ncon.close()")
    v = path_verdict(pk, path, cell, _served)
    assert v.verdict == ("blocked" if path in ("fork session", "transplant session") else "no-crash"), v


@pytest.mark.parametrize("cell", [
    "import socket\nhost = socket.gethostname()\nassert host and isinstance(host, str)",  # (round 17h F9)
    "import sqlite3, pandas as pd\ncon = sqlite3.connect('app2.db')\npd.DataFrame({'a': [1]}).to_sql('t', con)",
])
def test_honest_cells_under_the_guard_alone(pk, cell):
    from crane.kernel.untouched import Untouched
    from crane.sandbox import speculate
    from crane.sandbox.options import SandboxOptions

    conn = pk["conn"]
    with Untouched(conn) as watch:
        v = speculate(conn, cell, 60.0, sandbox=SandboxOptions(confinement="guard"))
    assert watch.unchanged, watch.changes()
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("cell", [
    "import socket\nsocket.gethostbyname('localhost')",  # (name resolution stays refused)
    "import pandas as pd\npd.DataFrame({'a': [1]}).to_sql('t', 'postgresql://u@127.0.0.1:9/x')",
])
def test_what_stays_refused_under_the_guard_alone(pk, cell):
    from crane.sandbox import speculate
    from crane.sandbox.options import SandboxOptions

    v = speculate(pk["conn"], cell, 60.0, sandbox=SandboxOptions(confinement="guard"))
    assert v.verdict == "blocked", v

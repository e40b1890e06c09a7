"""The portable sandbox's call guard (crane.sandbox.worker.guard), in this process: every call user code makes is
vetted by the callee object before it runs. For each family of the deny table: a cell that calls it directly,
through `getattr`, through a lambda a library calls back (pandas' `apply`), through a user class's `__del__`,
property and operator, and through `exec`: refused before the callee runs (the side effect is checked absent:
a file that must stay, a program that must not have run). Honest calls (reads, user code, libraries' own work,
writes into the run's working folder) pass. Each test fails without the guard (the callee would run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from crane.sandbox.worker import guard as guard_mod
from crane.sandbox.worker.guard import GUARD_TABLE, CallGuard, GuardRefusal

CELL = "<crane-sandbox-cell>"

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12) and not hasattr(sys, "monitoring"),
                                reason="no hook mechanism")


class Run:
    def __init__(self, refused: list[str], error: BaseException | None, ns: dict):
        self.refused, self.error, self.ns = refused, error, ns


def guarded(src: str, ns: dict | None = None, folder: Path | None = None) -> Run:
    """Run `src` as a cell under a fresh guard; what it refused (the worker ends the run at the first)."""
    refused: list[str] = []
    inside = (lambda p: os.path.abspath(os.fsdecode(p)).startswith(str(folder) + os.sep)) if folder else (
        lambda p: False)
    g = CallGuard(refused.append, inside=inside)
    g.trust(guarded.__code__)
    code = compile(src, CELL, "exec")
    ns = {"__name__": "__main__", **(ns or {})}
    error = None
    g.install()
    try:
        exec(code, ns)
    except BaseException as exc:  # noqa: BLE001 - the refusal, or the cell's own exception
        error = exc
    finally:
        g.uninstall()
    return Run(refused, error, ns)


@pytest.fixture(scope="module", autouse=True)
def no_warm_workers_of_other_tests():
    """These tests install the guard in this test process, which may also hold CRANE's own machinery from other
    tests run by the same xdist worker: a warm transplant worker ending meanwhile (its kernel gone, its idle time
    over) starts a reaping thread, which the guard's `threading.setprofile` would vet as user code (CRANE runs from
    the checkout, not the interpreter's prefix) and refuse (`os.killpg`). The product never meets this (the guard
    runs only in the worker process, which holds no such machinery), so end those workers first."""
    from crane.sandbox.transplant import POOL

    POOL.shutdown()
    yield


@pytest.fixture
def marker(tmp_path):
    p = tmp_path / "marker"
    yield p


def _refused(run: Run, family: str) -> None:
    assert run.refused, f"nothing refused (error: {run.error!r})"
    assert run.refused[0].startswith(f"a call to {family}:"), run.refused
    assert isinstance(run.error, GuardRefusal) or run.error is None, run.error  # (a __del__ swallows it)


# -- the ways to reach a callee -------------------------------------------------------------------------------
WAYS = {
    "direct": "{call}",
    "getattr": "f = getattr(__import__('{mod}'), '{first}' + '{rest}')\nf({args})",
    "lambda in a library": "import pandas as pd\npd.Series([1]).apply(lambda v: {call})",
    "__del__": "class C:\n    def __del__(self):\n        {call}\nc = C()\ndel c",
    "property": "class C:\n    @property\n    def p(self):\n        return {call}\nC().p",
    "operator": "class C:\n    def __add__(self, other):\n        return {call}\nC() + 1",
    "exec": "exec({call!r})",
}


@pytest.mark.parametrize("way", list(WAYS))
def test_os_system_is_refused_every_way(way, marker):
    call = f"__import__('os').system('touch {marker}')"
    src = WAYS[way].format(call=call, mod="os", first="sys", rest="tem", args=f"'touch {marker}'")
    run = guarded(src)
    _refused(run, "builtins" if way == "exec" else "os")
    assert not marker.exists()


@pytest.mark.parametrize("way", list(WAYS))
def test_a_writer_outside_the_working_folder_is_refused_every_way(way, tmp_path):
    import pandas as pd

    target = tmp_path / "out.csv"
    call = f"df.to_csv({str(target)!r})"
    src = WAYS[way].format(call=call, mod="os", first="get", rest="cwd", args="")
    if way == "getattr":
        src = f"w = getattr(df, 'to_' + 'csv')\nw({str(target)!r})"
    run = guarded(src, {"df": pd.DataFrame({"a": [1]})})
    _refused(run, "builtins" if way == "exec" else "pandas")
    assert not target.exists()


def test_a_writer_into_the_working_folder_passes(tmp_path):
    import pandas as pd

    run = guarded(f"df.to_csv({str(tmp_path / 'out.csv')!r})", {"df": pd.DataFrame({"a": [1]})}, folder=tmp_path)
    assert not run.refused and run.error is None
    assert (tmp_path / "out.csv").exists()


# -- one cell per family of the deny table (the callee must not have run) -------------------------------------
FAMILIES = [
    ("os", "import os\nos.popen('true')"),
    ("os", "import os\nos.kill(os.getpid() + 10_000_000, 0)" if False else "import os\nos.nice(1)"),
    ("os", "import os\nos.fork()"),
    ("os", "import os\nos.mkfifo({victim_file!r})"),  # (no audit event: only the guard sees it)
    ("shutil", "import shutil\nshutil.rmtree({victim!r})"),
    ("subprocess", "import subprocess\nsubprocess.run(['true'])"),
    ("socket", "import socket\nsocket.socket()"),
    ("socket", "import socket\nsocket.getaddrinfo('localhost', 80)"),
    ("ctypes", "import ctypes\nctypes.CDLL(None)"),
    ("signal", "import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)"),
    ("signal", "import signal\nsignal.alarm(100)"),
    ("threading", "import threading\nthreading.Thread(target=print).start()"),
    ("importlib", "import importlib.util\nimportlib.util.spec_from_file_location('m', {victim_file!r})"),
    ("importlib", "import importlib, json\nimportlib.reload(json)"),  # (a library's source run again: not vetted)
    ("gc", "import gc\ngc.get_objects()"),
    ("sys", "import sys\nsys.settrace(None)"),
    ("sys", "import sys\nsys.setprofile(None)"),
    ("builtins", "eval('1')"),
    ("builtins", "compile('1', 'x', 'eval')"),
    ("numpy", "import numpy as np\nnp.save({victim_file!r}, np.zeros(2))"),
    ("joblib", "import joblib\njoblib.dump([1], {victim_file!r})"),
    ("matplotlib", "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                   "plt.plot([1])\nplt.savefig({victim_file!r})"),
    ("multiprocessing", "import multiprocessing\nmultiprocessing.Process(target=print).start()"),
    ("urllib", "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/')"),
]


@pytest.mark.parametrize(("family", "src"), FAMILIES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(FAMILIES)])
def test_each_family_is_refused_before_it_runs(family, src, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    victim_file = tmp_path / "victim.out"
    pid = os.getpid()
    threads_before = __import__("threading").active_count()
    run = guarded(src.format(victim=str(victim), victim_file=str(victim_file)))
    assert os.getpid() == pid  # (a fork that ran would have two processes asserting)
    _refused(run, family)
    assert (victim / "keep.txt").read_text() == "keep" and not victim_file.exists()
    assert __import__("threading").active_count() == threads_before


def test_the_notebooks_own_module_is_imported_by_name_and_reloaded(tmp_path, monkeypatch):
    """`importlib.import_module(name)` is `import name`; `importlib.reload(utils)` of the notebook's own module runs
    user code, vetted as the cell's (round 16 F11: both were `blocked`). A library's module stays refused to reload,
    also one whose `__file__` claims the notebook's folder (reload finds its source again by name)."""
    (tmp_path / "crane_nb_utils.py").write_text("import os\ndef f():\n    return 1\n")
    (tmp_path / "crane_nb_bad.py").write_text("import os\nRAN = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = guarded("import importlib\nm = importlib.import_module('crane_nb_utils')\nassert m.f() == 1\n"
                  "assert importlib.reload(m) is m and m.f() == 1\nimport json\n"
                  "assert importlib.import_module('json') is json")
    assert not run.refused and run.error is None, run
    # a reloaded module of the notebook's runs as user code: what it calls is vetted
    (tmp_path / "crane_nb_bad.py").write_text("import os\nos.system('true')\n")
    import crane_nb_bad  # noqa: F401 - (imported first without the guard: its first source is harmless)
    run = guarded("import importlib, crane_nb_bad\nimportlib.reload(crane_nb_bad)")
    _refused(run, "os")
    import colorsys
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "colorsys.py").write_text("")  # (not on the module's search path: the library's is found)
    monkeypatch.setattr(colorsys, "__file__", str(tmp_path / "elsewhere" / "colorsys.py"))
    run = guarded("import importlib, colorsys\nimportlib.reload(colorsys)")
    _refused(run, "importlib")  # (handing import_module to other code stays refused: handed_anywhere_in_interpreter)


def test_the_callee_not_its_name_is_vetted():
    """An alias, a stored reference or a rebinding does not change what is called; a harmless function named
    like a refused one passes."""
    run = guarded("import os\nrun_it = os.system\nx = {'k': run_it}\nx['k']('true')")
    _refused(run, "os")
    run = guarded("def system(cmd):\n    return cmd\nsystem('rm -rf /')\nclass os:\n    system = staticmethod(system)\n"
                  "os.system('x')")
    assert not run.refused and run.error is None


def test_honest_cells_pass(tmp_path):
    import numpy as np
    import pandas as pd

    (tmp_path / "d.csv").write_text("a,b\n1,2\n3,4\n")
    src = (f"import os, json, math, pandas as pd, numpy as np\n"
           f"df = pd.read_csv({str(tmp_path / 'd.csv')!r})\n"
           "df['c'] = df.apply(lambda r: r.a + r.b, axis=1)\n"
           "class Acc:\n    def __init__(self):\n        self.n = 0\n    def __add__(self, o):\n"
           "        self.n += o\n        return self\n"
           "acc = Acc() + int(df.c.sum())\n"
           f"files = sorted(os.listdir({str(tmp_path)!r}))\n"
           "here = os.getcwd(); st = os.stat(files and here)\n"
           "out = json.dumps({'n': acc.n, 'm': math.sqrt(4)})\n"
           "arr = np.arange(6).reshape(2, 3).sum(axis=0)\n"
           "import gc\ngc.collect()\n"
           "import sys\nsys.setrecursionlimit(sys.getrecursionlimit())\n")
    run = guarded(src, {"pd": pd, "np": np})
    assert not run.refused and run.error is None, (run.refused, run.error)
    assert run.ns["acc"].n == 10 and run.ns["out"] == '{"n": 10, "m": 2.0}'


def test_library_internals_are_not_vetted_call_by_call(tmp_path):
    """Reading a CSV is os calls made by pandas, not by the cell: they pass; the cell's own call to the same C
    function is vetted."""
    import pandas as pd

    (tmp_path / "d.csv").write_text("a\n1\n")
    run = guarded(f"pd.read_csv({str(tmp_path / 'd.csv')!r})\nimport platform\nplatform.system()", {"pd": pd})
    assert not run.refused and run.error is None, run.refused


def test_every_row_of_the_table_names_a_family_and_a_scope():
    for family, rows in GUARD_TABLE.items():
        for row in rows:
            module, path, paths, scope = row[:4]
            assert scope in (guard_mod.GUARD_ANY, guard_mod.GUARD_USER)
            assert paths is None or all(isinstance(a, str) for a in paths)
            assert isinstance(module, str) and isinstance(path, str) and family


def test_table_rows_resolve_to_the_libraries_functions():
    """The rows of the libraries installed here resolve to code objects (a renamed API would silently stop being
    vetted otherwise)."""
    import joblib  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    g = CallGuard(lambda label: None)
    labels = {e.label for e in g.codes.values()}
    for want in ("pandas: pandas.core.generic.NDFrame.to_csv", "pandas: pandas.core.frame.DataFrame.to_parquet",
                 "numpy: numpy.save", "joblib: joblib.dump", "matplotlib: matplotlib.figure.Figure.savefig",
                 "subprocess: subprocess.Popen", "shutil: shutil.rmtree", "os: os.popen"):
        assert want in labels, (want, sorted(labels))


def test_a_library_imported_during_the_run_is_vetted_too(tmp_path):
    """Rows of a module not loaded when the guard starts are resolved when it is imported (the audit layer
    flags imports; here the flag is set by hand)."""
    sys.modules.pop("wave", None)
    GUARD_TABLE.setdefault("_test_wave", [("wave", "open", None, guard_mod.GUARD_ANY)])
    try:
        refused: list[str] = []
        g = CallGuard(refused.append)
        assert not any(e.label.startswith("_test_wave") for e in g.codes.values())
        import wave  # noqa: F401

        g.dirty = True
        g.trust(test_a_library_imported_during_the_run_is_vetted_too.__code__)
        code = compile(f"import wave\nwave.open({str(tmp_path / 'x.wav')!r}, 'wb')", CELL, "exec")
        g.install()
        try:
            exec(code, {})
        except GuardRefusal:
            pass
        finally:
            g.uninstall()
        assert refused and refused[0].startswith("a call to _test_wave:"), refused
        assert not (tmp_path / "x.wav").exists()
    finally:
        GUARD_TABLE.pop("_test_wave", None)

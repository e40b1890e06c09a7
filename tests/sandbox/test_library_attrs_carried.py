"""What an earlier cell put on library modules and classes is the copy's too (red team round 18, G2 and G19;
kernel/library_attrs.py, worker/main `_set_library_attrs`).

`tqdm.pandas()` puts `progress_apply` on pandas' classes, `np.float = float` is a compatibility shim,
`np.random.default_rng = functools.partial(np.random.default_rng, 0)` fixes a seed, `collections.Callable =
collections.abc.Callable` brings back a removed alias: a fresh worker imports each library again, so each cell
reading one was a certain false AttributeError (or AssertionError) on the copy paths. The kernel finds the names the
cell reads on the library modules and classes of its values and copies the values a worker would lack; the worker
sets them (a standard library module only takes a name it lacks; the notebook's own function only goes where the
worker's module lacks the name). What is not copied (the notebook's class on a library module) makes the copy's
AttributeError only likely; an attribute the kernel lacks too stays a certain
crash. IPython 8 and 9, the six paths, the kernel and files unchanged (end_paths), checked against the real run."""

from __future__ import annotations

import sys

import pytest

from crane.sandbox.cell_names import cell_attrs

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)

HISTORY = ("import functools, collections, collections.abc\nimport numpy as np, pandas as pd\ntry:\n"
           "    from tqdm import tqdm\n    tqdm.pandas(disable=True)\n    TQDM = True\nexcept ImportError:\n"
           "    TQDM = False\ndf = pd.DataFrame({'b': [4.0, 5.0]})\nnp.float = float\n"
           "_RNG = np.random.default_rng\nnp.random.default_rng = functools.partial(_RNG, 0)\n"
           "collections.Callable = collections.abc.Callable\nnp.nb_helper = lambda v: v + offset\noffset = 1\n"
           "class _NbThing:\n    pass\nnp.NbThing = _NbThing\ndel _NbThing\n_FLOOR = np.floor\n"
           "def _my_floor(x):\n    return _FLOOR(x) + 100\nnp.floor = _my_floor")
RESET = ("np.random.default_rng = _RNG\nnp.floor = _FLOOR\ndel np.float, collections.Callable, np.nb_helper, np.NbThing\n"
         "for _c in (pd.Series, pd.DataFrame):\n"
         "    for _n in [n for n in vars(_c) if n.startswith('progress_')]:\n        delattr(_c, _n)")

CARRIED = {
    "tqdm.pandas": "r = df.b.progress_apply(lambda v: v * 2)\nassert r.sum() == 18.0",
    "np.float": "assert np.float(3) == 3.0",
    "partial": "assert np.random.default_rng().integers(10**9) == np.random.default_rng().integers(10**9)",
    "stdlib alias": "assert isinstance(len, collections.Callable)",
    "notebook function": "offset = 2\nassert np.nb_helper(1) == 3",  # (it reads the namespace, as in the kernel)
}


@pytest.fixture(scope="module")
def patched(pk):
    assert pk["conn"].run_cell(HISTORY, timeout=120).status == "ok"
    yield pk
    assert pk["conn"].run_cell(RESET, timeout=60).status == "ok"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CARRIED))
def test_what_an_earlier_cell_put_on_a_library_is_the_copys(patched, path, case):
    if case == "tqdm.pandas" and not patched["conn"].evaluate("TQDM"):
        pytest.skip("tqdm is not in this kernel environment (envs/kernel-today.txt)")
    cell = CARRIED[case]
    v = path_verdict(patched, path, cell, _served)
    truth = patched["conn"].run_cell(cell, timeout=60)
    assert truth.status == "ok", truth
    if case == "partial" and not path.startswith("fork") and patched["conn"].evaluate("_RNG.__module__") == "numpy.random":
        # numpy 2's `default_rng` says it is `numpy.random`'s, which now holds the partial: the original pickles by
        # no name, the partial is not copied, and the copy's draws are the library's own: only likely, saying why
        assert not v.certain and "numpy.random.default_rng" in (v.reason or ""), v
        return
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_a_notebook_class_on_a_library_module_makes_the_copys_attribute_error_likely(patched, path):
    v = path_verdict(patched, path, "print(np.NbThing())", _served)
    truth = patched["conn"].run_cell("print(np.NbThing())", timeout=60)
    assert truth.status == "ok", truth
    assert (v.verdict, v.ename, v.certain) == ("crash", "AttributeError", False), v
    assert "has the attribute 'NbThing'" in (v.reason or ""), v.reason


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_the_notebooks_function_over_a_librarys_makes_the_copy_likely(patched, path):
    """`np.floor = my_floor` (a wrapper, as `torch.load = my_load` is): never set over the worker's own (a later
    load would run it where numpy's is looked up), so a cell reading it is only likely (the review's finding 1)."""
    cell = "assert np.floor(1.5) == 101.0"
    v = path_verdict(patched, path, cell, _served)
    assert patched["conn"].run_cell(cell, timeout=60).status == "ok"
    assert not v.certain and "numpy.floor" in (v.reason or ""), v


@pytest.mark.parametrize("path", PATHS)
def test_an_attribute_the_kernel_lacks_too_is_a_certain_crash(patched, path):
    v = path_verdict(patched, path, "np.floatt(3)", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "AttributeError", True), v


def test_the_attribute_names_a_cell_reads():
    assert set(cell_attrs("r = df.b.progress_apply(lambda v: v * 2)\nnp.random.default_rng()")) == \
        {"progress_apply", "b", "default_rng", "random"}
    assert cell_attrs("getattr(np, 'float')\nhasattr(pd, 'np')\ngetattr(x, name)") == ["float", "np"]
    assert "float" in cell_attrs("%time y = np.float(3)")  # (a line magic's text too)
    assert cell_attrs("x = (np.float(") == ["float"]  # (text that does not parse: its dotted names)


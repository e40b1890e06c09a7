"""A copy holds the notebook's classes of its values under their names, as the kernel does (round 16, F1): a cell
pickling an instance of a class an earlier cell defined (`pickle.dump(p, f)`, `torch.save(model, path)`: pickle
finds a class by `__main__.<name>`) was a certain false PicklingError on every copy path when the cell named only
the instance. kernel/export._classes_by_name copies the class too where the namespace binds it under its name (a
value's own class, and its first items' for a plain list, tuple or dict); an older class the kernel rebound since is
not, so pickling an instance of it fails as in the kernel. The six paths (the fork path is the kernel's own),
IPython 8 and 9."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
CLASSES = ("class Point:\n    def __init__(self, x):\n        self.x = x\n"
           "p = Point(3)\npts = [Point(1), Point(2)]\nby = {'a': Point(4)}\n")


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.fixture
def with_classes(pk):
    assert pk["conn"].run_cell(CLASSES, timeout=60).status == "ok"
    return pk


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "import pickle\nassert pickle.loads(pickle.dumps(p)).x == 3",
    "import pickle\nassert [q.x for q in pickle.loads(pickle.dumps(pts))] == [1, 2]",
    "import pickle\nassert pickle.loads(pickle.dumps(by))['a'].x == 4",
], ids=["instance", "list", "dict"])
def test_pickling_an_instance_of_a_notebook_class(with_classes, path, cell):
    v = path_verdict(with_classes, path, cell, _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PATHS)
def test_an_instance_of_a_class_rebound_since_fails_as_in_the_kernel(with_classes, path):
    conn = with_classes["conn"]
    assert conn.run_cell("old = p\nclass Point:\n    pass\n", timeout=60).status == "ok"
    try:
        v = path_verdict(with_classes, path, "import pickle\npickle.dumps(old)", _served)
    finally:
        assert conn.run_cell(CLASSES, timeout=60).status == "ok"
    assert (v.verdict, v.ename, v.line) == ("crash", "PicklingError", 2), v

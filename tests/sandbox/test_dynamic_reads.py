"""kernel/dynamic_reads.py: the kernel names a notebook function reads by a string, found from the cell's names
through the notebook's functions and classes (their code objects' global loads and class dicts, nothing called),
and the functions named readers of the namespace itself (whose crashes in a copy lacking kernel names are only
likely; they also take the cell's own strings' names: `getv('x')`). The kernel paths: test_copy_shell.py."""

from __future__ import annotations

import dis

import pytest

from crane.sandbox.kernel import pickling
from crane.sandbox.kernel.dynamic_reads import dynamic_reads

NOTEBOOK = '''
def f():
    return globals()['x'] + 1
def outer():
    return f()
def ping(n):
    return pong(n - 1) if n else 0
def pong(n):
    return ping(n)
class Record:
    def __repr__(self):
        return str(vars(self)) + str(self.__dict__) + 'y'
    @property
    def total(self):
        return eval('z + 1')
    @staticmethod
    def helper():
        return __import__('sys').modules['w']
record = Record()
x, y, z, w = 1, 2, 3, 4
'''


@pytest.fixture(autouse=True)
def walker():
    """The export's walk of a code object's global names (kernel/pickling._global_walker), as `_cloudpickle` sets
    it up in the kernel."""
    kept = list(pickling._WALKER)
    pickling._WALKER[:] = [pickling._global_walker(dis)]
    yield
    pickling._WALKER[:] = kept


def _ns() -> dict:
    ns: dict = {"__name__": "__main__"}
    exec(NOTEBOOK, ns)
    return ns


def test_a_function_reading_by_a_string_gives_its_names_and_is_a_reader():
    assert dynamic_reads(_ns(), ["outer"], []) == (["x"], ["f"])


def test_a_class_reached_through_an_instance_gives_its_methods_names_and_only_namespace_readers_are_named():
    extra, readers = dynamic_reads(_ns(), ["record"], [])
    assert sorted(extra) == ["w", "y", "z"]  # (`vars(self)`, `self.__dict__`, `sys.modules`: their strings' names
    # copied, a superset, each once)
    assert readers == ["Record.total"]  # (only `eval` reaches the namespace itself)


def test_names_the_namespace_lacks_and_cycles_end():
    ns = _ns()
    del ns["x"]
    assert dynamic_reads(ns, ["outer", "ping", "missing"], []) == ([], ["f"])
    assert dynamic_reads({"__name__": "__main__"}, ["anything"], []) == ([], [])


def test_a_function_with_no_dynamic_read_adds_nothing():
    ns = _ns()
    exec("def plain():\n    return 'x' + str(y)\n", ns)
    assert dynamic_reads(ns, ["plain"], ["x"]) == ([], [])


EVALUATE = '''
import collections
Point = collections.namedtuple('Point', 'x y')
def evaluate(model):
    """x y z"""
    model.eval()
    return model.globals
'''


def test_an_attribute_named_like_a_builtin_is_no_read_and_library_functions_are_not_followed():
    ns = _ns()
    exec(EVALUATE, ns)
    assert dynamic_reads(ns, ["evaluate", "Point"], []) == ([], [])


def test_a_reader_given_the_name_takes_the_cells_strings():
    ns = _ns()
    exec("def getv(n):\n    return globals()[n]\n", ns)
    assert dynamic_reads(ns, ["getv"], ["x", "nothing_here"]) == (["x"], ["getv"])
    assert dynamic_reads(ns, ["outer"], ["y"]) == (["x", "y"], ["f"])


def test_a_class_with_a_planted_key_is_not_read():
    ns = _ns()
    calls: list = []

    class Key:
        def __hash__(self):
            return hash("__module__")

        def __eq__(self, other):
            calls.append(other)
            return False

    body: dict = {Key(): 1, "__module__": "__main__", "m": ns["f"]}
    ns["odd"] = type("Odd", (), body)()
    calls.clear()  # (`type()` itself looked `__module__` up in the namespace it was given)
    assert dynamic_reads(ns, ["odd"], []) == ([], []) and calls == []
    anon: dict = {}
    exec("Anon = type('Anon', (), {})\nanon = Anon()", anon)  # (a heap type with no `__module__` of its own)
    ns["anon"] = anon["anon"]
    assert dynamic_reads(ns, ["anon"], []) == ([], [])

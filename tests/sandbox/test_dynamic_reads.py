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
    """The export's walks of a code object's global names (kernel/pickling._global_walker), as `_cloudpickle` sets
    them up in the kernel."""
    kept = list(pickling._WALKER)
    pickling._WALKER[:] = list(pickling._global_walker(dis))
    yield
    pickling._WALKER[:] = kept


def _reads(ns: dict, names: list, strings: list) -> tuple[list, list]:
    """The names to copy and the readers (what `dynamic_reads` says of strings)."""
    extra, readers, _, _ = dynamic_reads(ns, names, strings)
    return extra, readers


def _ns() -> dict:
    ns: dict = {"__name__": "__main__"}
    exec(NOTEBOOK, ns)
    return ns


def test_a_function_reading_by_a_string_gives_its_names_and_is_a_reader():
    assert _reads(_ns(), ["outer"], []) == (["x"], ["f"])


def test_a_class_reached_through_an_instance_gives_its_methods_names_and_only_namespace_readers_are_named():
    extra, readers = _reads(_ns(), ["record"], [])
    assert sorted(extra) == ["w", "y", "z"]  # (`vars(self)`, `self.__dict__`, `sys.modules`: their strings' names
    # copied, a superset, each once)
    assert readers == ["Record.total"]  # (only `eval` reaches the namespace itself)


def test_names_the_namespace_lacks_and_cycles_end():
    ns = _ns()
    del ns["x"]
    assert _reads(ns, ["outer", "ping", "missing"], []) == ([], ["f"])
    assert _reads({"__name__": "__main__"}, ["anything"], []) == ([], [])


def test_a_function_with_no_dynamic_read_adds_nothing():
    ns = _ns()
    exec("def plain():\n    return 'x' + str(y)\n", ns)
    assert _reads(ns, ["plain"], ["x"]) == ([], [])


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
    assert _reads(ns, ["evaluate", "Point"], []) == ([], [])


def test_a_reader_given_the_name_takes_the_cells_strings():
    ns = _ns()
    exec("def getv(n):\n    return globals()[n]\n", ns)
    assert _reads(ns, ["getv"], ["x", "nothing_here"]) == (["x"], ["getv"])
    assert _reads(ns, ["outer"], ["y"]) == (["x", "y"], ["f"])


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
    assert _reads(ns, ["odd"], []) == ([], []) and calls == []
    anon: dict = {}
    exec("Anon = type('Anon', (), {})\nanon = Anon()", anon)  # (a heap type with no `__module__` of its own)
    ns["anon"] = anon["anon"]
    assert _reads(ns, ["anon"], []) == ([], [])


HELPERS = '''
import settings_mod
LABELS = {'cat', 'dog', 'fish'}
ORDER = ['a']
def ordered():
    return [c for c in LABELS]
def via():
    return ordered()
def known(c):
    return c in LABELS and len(LABELS) > 1 and sorted(LABELS)
def dedupe(c):
    if LABELS and not SEEN:
        SEEN.add(c)
    return SEEN.union({c})
def by_id(o):
    return id(o), o.id
def has_id(o):
    return o.id
def reads_module():
    return settings_mod.THRESHOLD
'''


def test_the_names_reached_functions_read_and_the_sets_they_iterate():
    """`reach`: the names the notebook functions the cell reaches read (loads and attributes), beyond the cell's;
    `reach_sets`: the namespace's sets of strings one of them reads other than by `in`, `len`, `sorted`, ..."""
    ns = _ns()
    ns["settings_mod"] = type(dis)("settings_mod")
    exec(HELPERS.replace("import settings_mod\n", ""), ns)
    _, _, reach, sets = dynamic_reads(ns, ["via", "reads_module"], [])
    assert {"ordered", "LABELS", "settings_mod", "THRESHOLD"} <= set(reach) and "via" not in reach, reach
    assert sets == ["LABELS"]
    _, _, reach, sets = dynamic_reads(ns, ["known"], [])
    assert "LABELS" in reach and sets == []  # (membership, len, sorted: no order shows)
    ns["SEEN"] = {"a", "b"}
    _, _, reach, sets = dynamic_reads(ns, ["dedupe"], [])
    assert sets == []  # (truth, `not`, a set method: no order shows)
    assert "id()" in dynamic_reads(ns, ["by_id"], [])[2]  # (the builtin `id` loaded: shared/carry.REACH_ID_CALL)
    assert "id()" not in dynamic_reads(ns, ["has_id"], [])[2]  # (an attribute named `id` is not)
    ns["LABELS"] = {"cat"}  # (one item: one order)
    assert dynamic_reads(ns, ["via"], [])[3] == []

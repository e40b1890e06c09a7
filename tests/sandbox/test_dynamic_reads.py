"""kernel/dynamic_reads.py: the kernel names a notebook function reads by a string, found from the cell's names
through the notebook's functions and classes (their code objects and class dicts, nothing called), and the functions
named readers of the namespace itself (whose crashes in a copy lacking kernel names are only likely). The kernel
paths: test_copy_shell.py."""

from __future__ import annotations

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


def _ns() -> dict:
    ns: dict = {"__name__": "__main__"}
    exec(NOTEBOOK, ns)
    return ns


def test_a_function_reading_by_a_string_gives_its_names_and_is_a_reader():
    assert dynamic_reads(_ns(), ["outer"]) == (["x"], ["f"])


def test_a_class_reached_through_an_instance_gives_its_methods_names_and_only_namespace_readers_are_named():
    extra, readers = dynamic_reads(_ns(), ["record"])
    assert set(extra) == {"y", "z", "w"}  # (`vars(self)`, `self.__dict__`, `sys.modules`: copied, a superset)
    assert readers == ["Record.total"]  # (only `eval` reaches the namespace itself)


def test_names_the_namespace_lacks_and_cycles_end():
    ns = _ns()
    del ns["x"]
    assert dynamic_reads(ns, ["outer", "ping", "missing"]) == ([], ["f"])
    assert dynamic_reads({"__name__": "__main__"}, ["anything"]) == ([], [])


def test_a_function_with_no_dynamic_read_adds_nothing():
    ns = _ns()
    exec("def plain():\n    return 'x' + str(y)\n", ns)
    assert dynamic_reads(ns, ["plain"]) == ([], [])

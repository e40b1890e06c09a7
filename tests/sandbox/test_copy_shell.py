"""The kernel's shell kept in a variable (`ip = get_ipython()`, a common idiom; a bound method of it, an object
holding it) is the worker's shell in a copy, as `get_ipython()` there gives it: before, every cell using `ip` was
`unavailable` on the copy paths ("cannot pickle 'sqlite3.Connection'": the pickler walked into the shell's history
database). A name of the kernel the cell reaches by a string (`globals()['x']`, `'x' in vars()`,
`user_ns.get('x')`, `eval('x + 1')`, `getattr(__main__, 'x')`) is copied (sandbox/cell_names.py): before, a certain
false crash (`globals().get('x') + 1`: a TypeError of None). One it reaches by a computed key, not copied, is no
certain crash (a likely one, naming why; a one-shot `eval` is `unavailable`): before, a certain false `KeyError`;
nor is a crash of a cell reading the namespace as a whole (`for k in globals()`), whose copy lacked kernel names.
The same holds where a notebook function the cell calls reads the namespace so (kernel/dynamic_reads.py), and a
function reached only through another's globals reads the worker's namespace (worker/main._rebind).
An honest KeyError stays the cell's crash. Every path, IPython 8 and 9."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)

SETUP = "ip = get_ipython()\nclass Holder:\n    pass\nholder = Holder()\nholder.shell = ip\nmagic = ip.run_line_magic\n"
USES_SHELL = ("assert holder.shell is ip and magic.__self__ is ip and ip is get_ipython()\n"
              "here = ip.run_line_magic('pwd', '')\nassert isinstance(here, str) and here\n")


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.fixture
def with_shell(pk):
    assert pk["conn"].run_cell(SETUP, timeout=60).status == "ok"
    return pk


@pytest.mark.parametrize("path", PATHS)
def test_the_shell_in_a_variable_is_the_runs_shell(with_shell, path):
    v = path_verdict(with_shell, path, USES_SHELL, _served)
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", ["print(globals()['x'] + 1)", "print(get_ipython().user_ns.get('x') + 1)",
                                  "assert 'x' in vars()", "print(ip.user_ns['x'] + 1)", "print(eval('x + 1'))",
                                  "exec('y = x + 1')\nprint(y)", "import __main__\nprint(getattr(__main__, 'x') + 1)",
                                  "import sys\nprint(sys.modules['__main__'].__dict__['x'] + 1)"])
def test_a_kernel_name_read_by_a_string_is_copied(with_shell, path, cell):
    v = path_verdict(with_shell, path, cell, _served)
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


READERS = ("def f():\n    return globals()['x'] + 1\ndef outer():\n    return f()\n"
           "class Reader:\n    def get(self):\n        return eval('x + 1')\n    @property\n    def has(self):\n"
           "        return 'x' in get_ipython().user_ns\nreader = Reader()\n"
           "def computed():\n    return globals()[chr(120)]\n"
           "def helper():\n    return factor * 2\ndef run():\n    return helper()\n"
           "def ping(n):\n    return pong(n - 1) if n else 0\ndef pong(n):\n    return ping(n)\n"
           "def getv(n):\n    return globals()[n]\n"
           "class Base:\n    def m(self):\n        return factor\n    @property\n    def p(self):\n        return factor\n"
           "class Child(Base):\n    pass\nchild = Child()\n"
           "import sqlite3\ntry:\n    conn.close()\nexcept NameError:\n    pass\nconn = sqlite3.connect(':memory:')\n"
           "def documented():\n    'reads x (not conn)'\n    return globals()['x']\n")


@pytest.fixture
def with_readers(with_shell):  # (the last test's `conn` closed first: see test_bound_first.RECONNECT)
    assert with_shell["conn"].run_cell(READERS, timeout=60).status == "ok"
    return with_shell


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", ["print(f())", "print(outer())", "print(reader.get())", "assert reader.has",
                                  "print(getv('x') + 1)", "assert 'x' in dir()",
                                  "print(globals()['x'] + 1, 'conn is only mentioned')", "print(documented() + 1)"])
def test_a_kernel_name_a_notebook_function_reads_by_a_string_is_copied(with_readers, path, cell):
    v = path_verdict(with_readers, path, cell, _served)
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", ["factor = 3\nassert run() == 6", "assert ping(5) == 0",
                                  "factor = 4\nassert child.m() == 4 and child.p == 4"])
def test_a_notebook_function_reached_through_another_reads_the_namespace(with_readers, path, cell):
    """`helper`, copied only as a global of `run`, and a method or property inherited from a notebook base class,
    see the `factor` the cell binds (before: a certain false NameError or AssertionError; they kept globals of their
    own)."""
    v = path_verdict(with_readers, path, cell, _served)
    assert (v.verdict, v.ename, v.certain) == ("no-crash", None, True), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
@pytest.mark.parametrize("cell", ["print(globals()[chr(120)])", "print(get_ipython().user_ns[chr(120)])",
                                  "print(ip.user_ns[chr(120)])", "print(eval(chr(120)))",
                                  "print(computed())"])  # (a notebook function reading a computed name)
def test_a_kernel_name_read_indirectly_and_not_copied_is_no_certain_crash(with_readers, path, cell):
    v = path_verdict(with_readers, path, cell, _served)
    if v.verdict == "unavailable":  # (a one-shot worker's own rule for a NameError: worker/main._final_record)
        assert "it was not copied" in (v.reason or ""), v
        return
    assert v.verdict == "crash" and not v.certain, v
    assert "the copy did not hold it" in (v.reason or ""), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
@pytest.mark.parametrize("cell", ["found = [k for k in list(globals()) if k == chr(120)]\nprint(found[0])",
                                  "assert len(get_ipython().user_ns) > 0 and sum(1 for k in vars() if k == chr(120))",
                                  # (round 16, F6: a key computed from the namespace's names, a magic listing them)
                                  "short = {k[1:]: v for k, v in globals().items() if k.startswith('H')}\n"
                                  "print(short['older'])",
                                  "found = %who_ls type\nprint(found[0])"])
def test_a_cell_reading_the_namespace_as_a_whole_crashes_only_likely_in_a_copy(with_shell, path, cell):
    v = path_verdict(with_shell, path, cell, _served)
    assert v.verdict == "crash" and not v.certain, v
    assert "as a whole" in (v.reason or "") and "Holder" in (v.reason or ""), v  # (the first of the names, sorted)


@pytest.mark.parametrize("path", PATHS)
def test_an_honest_key_error_stays_the_cells_crash(with_shell, path):
    v = path_verdict(with_shell, path, "d = {'a': 1}\nd['x']", _served)
    assert (v.verdict, v.ename, v.evalue) == ("crash", "KeyError", "'x'"), v
    v = path_verdict(with_shell, path, "print(ip.user_ns['no_such_name'])", _served)
    assert (v.verdict, v.ename, v.evalue, v.certain) == ("crash", "KeyError", "'no_such_name'", True), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_a_kernel_name_read_as_an_attribute_of_main_is_no_certain_crash(pk, path):
    """A notebook function reading `__main__.xk` (its module imported as a global: the cell never names `xk`) got a
    copy without `xk`: a certain false AttributeError (round 16 follow-up, F3); now only likely, naming it."""
    assert pk["conn"].run_cell("import __main__ as _mm\ndef peek():\n    return _mm.xk + 1\nxk = 41\n",
                               timeout=60).status == "ok"
    v = path_verdict(pk, path, "rk = peek()\nprint(rk)", _served)
    if v.verdict == "crash":
        assert v.ename == "AttributeError" and not v.certain and "'xk'" in (v.reason or ""), v
    else:
        assert (v.verdict, v.ename) == ("no-crash", None), v

"""The kernel's shell kept in a variable (`ip = get_ipython()`, a common idiom; a bound method of it, an object
holding it) is the worker's shell in a copy, as `get_ipython()` there gives it: before, every cell using `ip` was
`unavailable` on the copy paths ("cannot pickle 'sqlite3.Connection'": the pickler walked into the shell's history
database). A name of the kernel the cell reaches by a string (`globals()['x']`, `'x' in vars()`,
`user_ns.get('x')`, `eval('x + 1')`, `getattr(__main__, 'x')`) is copied (sandbox/cell_names.py): before, a certain
false crash (`globals().get('x') + 1`: a TypeError of None). One it reaches by a computed key, not copied, is no
certain crash (a likely one, naming why; a one-shot `eval` is `unavailable`): before, a certain false `KeyError`;
nor is a crash of a cell reading the namespace as a whole (`for k in globals()`), whose copy lacked kernel names.
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


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
@pytest.mark.parametrize("cell", ["print(globals()[chr(120)])", "print(get_ipython().user_ns[chr(120)])",
                                  "print(ip.user_ns[chr(120)])", "print(eval(chr(120)))"])
def test_a_kernel_name_read_indirectly_and_not_copied_is_no_certain_crash(with_shell, path, cell):
    v = path_verdict(with_shell, path, cell, _served)
    if v.verdict == "unavailable":  # (a one-shot worker's own rule for a NameError: worker/main._final_record)
        assert "it was not copied" in (v.reason or ""), v
        return
    assert v.verdict == "crash" and not v.certain, v
    assert "the copy did not hold it" in (v.reason or ""), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
@pytest.mark.parametrize("cell", ["found = [k for k in list(globals()) if k == chr(120)]\nprint(found[0])",
                                  "assert len(get_ipython().user_ns) > 0 and sum(1 for k in vars() if k == chr(120))"])
def test_a_cell_reading_the_namespace_as_a_whole_crashes_only_likely_in_a_copy(with_shell, path, cell):
    v = path_verdict(with_shell, path, cell, _served)
    assert v.verdict == "crash" and not v.certain, v
    assert "as a whole" in (v.reason or "") and "holder" in (v.reason or ""), v


@pytest.mark.parametrize("path", PATHS)
def test_an_honest_key_error_stays_the_cells_crash(with_shell, path):
    v = path_verdict(with_shell, path, "d = {'a': 1}\nd['x']", _served)
    assert (v.verdict, v.ename, v.evalue) == ("crash", "KeyError", "'x'"), v
    v = path_verdict(with_shell, path, "print(ip.user_ns['no_such_name'])", _served)
    assert (v.verdict, v.ename, v.evalue) == ("crash", "KeyError", "'no_such_name'"), v

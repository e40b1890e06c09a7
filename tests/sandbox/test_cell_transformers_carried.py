"""Issue 42 (h1): the notebook's cell transformers on the copy paths (OS transplant and portable; one-shot runs and
sessions; IPython 8 and 9).

An earlier cell's input transformer (`input_transformers_post`, `input_transformers_cleanup`) rewrites every later
cell in the kernel; the copy's worker ran the cell as written, so a cell the kernel runs clean got a certain
NameError (or SyntaxError). The export now copies the notebook's transformers (kernel/transformers.py; by value,
never called in the kernel) and the worker's shell runs them (worker/main._set_transformers), so the copy
transforms the cell as the kernel does:
- a post transformer that rewrites a name away, a cleanup transformer that makes `hello!` a call: the kernel's
  verdict (no-crash, its output);
- a copied transformer that makes the cell read a name the cell's text does not name (never copied): a one-shot
  run is `unavailable` (the worker's rule for a kernel name reached indirectly), a session's NameError only "likely"
  (`transplant._uncopied_name`);
- a transformer that cannot be copied without running the notebook's code (its class defines `__reduce__`): not
  copied, and a crash is only "likely" (env.json `shell_missed`); its `__reduce__` never runs in the kernel;
- CRANE's own test watcher (crane.kernel.untouched registers an input transformer in the kernel during every run
  here) is not the notebook's: with nothing else registered, a crash stays certain.
Each case's transformer is registered, checked and taken back by the test itself; the kernel is unchanged by
every run (`Untouched`), its marker file never written.
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

PATHS = {
    "transplant": lambda conn, src: transplant(conn, src, 60.0),
    "portable": lambda conn, src: speculate(conn, src, 60.0, sandbox=SandboxOptions(confinement="portable")),
}
SESSIONS = {"transplant": None, "portable": SandboxOptions(confinement="portable")}
SETUP = """
import sys, types
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: every run is a copy
MARKER = {marker!r}
hidden_value = 42
def hello():
    print('hi')
"""

POST_ON = """
def _crane_h1_magic(lines):
    return [line.replace('magic_name', '7') for line in lines]
get_ipython().input_transformers_post.append(_crane_h1_magic)
"""
POST_OFF = "get_ipython().input_transformers_post.remove(_crane_h1_magic)"
CLEANUP_ON = """
import re
def _crane_h1_bang(lines):
    return [re.sub(r'^(\\w+)!$', r'\\1()', line.rstrip('\\n')) + '\\n' for line in lines]
get_ipython().input_transformers_cleanup.append(_crane_h1_bang)
"""
CLEANUP_OFF = "get_ipython().input_transformers_cleanup.remove(_crane_h1_bang)"
HIDDEN_ON = """
def _crane_h1_hidden(lines):
    return [line.replace('THE_ANSWER', 'hidden_value') for line in lines]
get_ipython().input_transformers_post.append(_crane_h1_hidden)
"""
HIDDEN_OFF = "get_ipython().input_transformers_post.remove(_crane_h1_hidden)"
REFUSED_ON = """
class _CraneH1Shout:
    def __reduce__(self):
        open(MARKER, 'a').write('reduce ran')
        return (_CraneH1Shout, ())
    def __call__(self, lines):
        return [line.replace('shout_name', '9') for line in lines]
_crane_h1_shout = _CraneH1Shout()
get_ipython().input_transformers_post.append(_crane_h1_shout)
"""
REFUSED_OFF = "get_ipython().input_transformers_post.remove(_crane_h1_shout)"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    marker = str(tmp_path_factory.mktemp("h1-marker") / "ran.txt")
    k = start_kernel(tmp_path_factory.mktemp(f"h1-transformers-{request.param}"), python=kernel_python(request.param))
    c = k.connection
    assert c.run_cell(SETUP.format(marker=marker), timeout=300).status == "ok"
    yield c, marker
    k.shutdown()


def _run(conn, path: str, cell: str):
    with Untouched(conn) as watch:
        v = PATHS[path](conn, cell)
    assert watch.unchanged, (watch.changes(), watch.outputs, v)
    return v


class _Registered:
    """A transformer registered in the kernel for the block (`on`), taken back after (`off`)."""

    def __init__(self, conn, on: str, off: str):
        self.conn, self.on, self.off = conn, on, off

    def __enter__(self):
        assert self.conn.run_cell(self.on).status == "ok"

    def __exit__(self, *exc):
        assert self.conn.run_cell(self.off).status == "ok"


@pytest.mark.parametrize("path", list(PATHS))
def test_the_copy_runs_the_notebook_s_input_transformers(kernel, path):
    conn, marker = kernel
    with _Registered(conn, POST_ON, POST_OFF):
        assert conn.run_cell("print(magic_name)").status == "ok"  # the kernel's own word
        v = _run(conn, path, "print(magic_name)")  # (before: a certain NameError)
        assert (v.verdict, v.stdout.strip()) == ("no-crash", "7"), v
        v = _run(conn, path, "print(magic_name, undefined_here)")  # a real crash beside it stays certain
        assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", True), v
    with _Registered(conn, CLEANUP_ON, CLEANUP_OFF):
        assert conn.run_cell("hello!").status == "ok"
        v = _run(conn, path, "hello!")  # (before: a certain SyntaxError)
        assert (v.verdict, v.stdout.strip()) == ("no-crash", "hi"), v
    assert not os.path.exists(marker)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_name_only_a_copied_transformer_reads_is_never_a_certain_crash(kernel, path):
    conn, _ = kernel
    with _Registered(conn, HIDDEN_ON, HIDDEN_OFF):
        assert conn.run_cell("print(THE_ANSWER)").status == "ok"
        v = _run(conn, path, "print(THE_ANSWER)")  # the daemon never saw `hidden_value` in the cell: not copied
        # (the worker's rule for a kernel name the cell reached indirectly: worker/main._final_record)
        assert v.verdict == "unavailable" and "'hidden_value'" in (v.reason or ""), (v.reason, v)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_transformer_that_cannot_be_copied_makes_a_crash_likely(kernel, path):
    conn, marker = kernel
    with _Registered(conn, REFUSED_ON, REFUSED_OFF):
        assert conn.run_cell("print(shout_name)").status == "ok"
        v = _run(conn, path, "print(shout_name)")  # (before: a certain NameError)
        assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", False), (v.reason, v)
    assert not os.path.exists(marker)  # its `__reduce__` never ran in the kernel
    v = _run(conn, path, "print(shout_name)")  # none of the notebook's left, CRANE's watcher's only: certain
    assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", True), v


@pytest.mark.parametrize("path", list(SESSIONS))
def test_a_session_transforms_as_the_kernel_and_honours_what_it_misses(kernel, path):
    conn, marker = kernel
    with _Registered(conn, POST_ON, POST_OFF), _Registered(conn, REFUSED_ON, REFUSED_OFF):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[path]) as sb:
                assert type(sb).__name__ == "TransplantSession", type(sb)
                v = sb.run("print(shout_name)")  # (before: a certain NameError in a session)
                assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", False), (v.reason, v)
        assert watch.unchanged, (watch.changes(), watch.outputs)
    with _Registered(conn, POST_ON, POST_OFF), _Registered(conn, HIDDEN_ON, HIDDEN_OFF):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[path]) as sb:
                v = sb.run("print(magic_name)")  # (before: a certain NameError)
                assert (v.verdict, v.stdout.strip()) == ("no-crash", "7"), v
                v = sb.run("print(THE_ANSWER)")
                assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", False), (v.reason, v)
                v = sb.run("print(undefined_in_session)")
                assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", True), v
        assert watch.unchanged, (watch.changes(), watch.outputs)
    assert not os.path.exists(marker)

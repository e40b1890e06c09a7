"""Fork sessions (issue 41): what a run leaves running never writes a verdict, on IPython 8 and 9 kernels.

A run's process makes its outcome after the cell's code, and a clean run's process becomes the session's head. A
profile or trace hook, a signal handler, a finalizer or an at-fork handler the cell installed would run among
CRANE's statements there: rewriting its own record (a raising cell reported clean) or, in a kept run's process, every
later reply the head writes. So right after a run's code its hooks stop (through functions bound before any command,
so rebinding `sys.setprofile` does not keep one on), the head takes `no-crash` only under the seal's clean code
(said by where the cell ended, not by the record), and the head forks without the cell's at-fork handlers. The kept
state still has them: each later run's code runs with the hooks the kept run installed."""

from __future__ import annotations

import pytest

from crane.sandbox.fork_session import SandboxSession

# a hook that turns every record or reply about a crash into a clean one, wherever CRANE writes it
REWRITE = '''
import sys, os
def _rewrite(obj):
    if type(obj) is dict and obj.get("verdict") == "crash":
        obj.update(verdict="no-crash", ename=None, evalue=None, traceback=[], line=None)
def _hook(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_write_json":
        _rewrite(frame.f_locals.get("obj"))
    return None
'''
HOOKS = {
    "profile": REWRITE + "sys.setprofile(_hook)\n",
    "trace": REWRITE + "sys.settrace(_hook)\n",
    "profile-kept-on": REWRITE + "sys.setprofile(_hook)\nsys.setprofile = lambda f: None\nsys.settrace = lambda f: None\n",
    "atfork": REWRITE + ("def _patch():\n    mod = sys.modules['_crane_sandbox']\n    orig = mod.__dict__['_write_json']\n"
                         "    def w(fd, obj):\n        _rewrite(obj)\n        return orig(fd, obj)\n"
                         "    mod.__dict__['_write_json'] = w\n"
                         "os.register_at_fork(before=_patch, after_in_parent=_patch, after_in_child=_patch)\n"),
    "finalizer": REWRITE + ("import gc\nclass _Cycle:\n    def __del__(self):\n        sys.setprofile(_hook)\n"
                            "for _ in range(2000):\n    c = _Cycle()\n    c.me = c\ndel c\n"),
}


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


@pytest.mark.parametrize("hook", list(HOOKS))
def test_a_hook_in_the_crashing_cell_does_not_make_it_clean(conn, hook):
    with SandboxSession.open(conn, budget_s=20) as sb:
        v = sb.run(HOOKS[hook] + "1 / 0")
        assert v.verdict != "no-crash", v
        after = sb.run("{}['k']")
        assert (after.verdict, after.ename) == ("crash", "KeyError"), after


@pytest.mark.parametrize("hook", list(HOOKS))
def test_a_kept_runs_hook_never_writes_a_later_reply(conn, hook):
    with SandboxSession.open(conn, budget_s=20) as sb:
        first = sb.run(HOOKS[hook] + "x = 1")
        assert first.verdict == "no-crash", first
        for _ in range(3):
            crash = sb.run("1 / 0")
            assert (crash.verdict, crash.ename) == ("crash", "ZeroDivisionError"), crash
        honest = sb.run("y = x + base")
        assert honest.verdict == "no-crash", honest
        assert sb.inspect("y") == "2"


def test_a_kept_runs_hooks_are_on_in_later_runs(conn):
    setup = ("import sys, gc, signal\ncalls = []\ndef prof(frame, event, arg):\n    pass\n"
             "def on_usr1(sig, frame):\n    calls.append(sig)\nsys.setprofile(prof)\nsignal.signal(signal.SIGUSR1, on_usr1)\n")
    with SandboxSession.open(conn, budget_s=20) as sb:
        assert sb.run(setup).verdict == "no-crash"
        later = sb.run("seen = (sys.getprofile() is prof, gc.isenabled(), signal.getsignal(signal.SIGUSR1) is on_usr1)")
        assert later.verdict == "no-crash", later
        assert sb.inspect("seen") == "(True, True, True)"

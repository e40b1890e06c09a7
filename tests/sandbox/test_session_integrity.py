"""No session a run can poison (issue 41): fork sessions on IPython 8 and 9 kernels. Every command runs in a fresh
fork of the session's head and the head writes the reply; a run that crashed, was refused or timed out is never the
state a later command starts from; a run that rebinds CRANE's own code (or the standard functions and builtins its
outcome path calls) is `blocked` and not kept. Each attack of round 5 (S1 rewriting the reply writer, S2 a library
monkeypatch, S3 builtins, S4 a refused call caught) and variants (every function of CRANE's module, json.dumps,
a write on every descriptor) is followed by the commands it aimed at: the crash comes back `crash`, the honest one
`no-crash`; nothing outside changes and the kernel stays as it was."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import FORGED, SandboxSession

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .test_verdict_integrity import REACH

SETUP = "import os, json, builtins\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n"

S1 = """
import sys
f = sys._getframe()
while f is not None:
    g = f.f_globals
    if '_write_json' in g and not getattr(g['_write_json'], 'forged', False):
        def fw(fd, rec, _o=g['_write_json']):
            if type(rec) is dict and rec.get('verdict') in ('crash', 'blocked'):
                rec = dict(rec, verdict='no-crash', ename=None, evalue=None, line=None, traceback=[], reason=None)
            return _o(fd, rec)
        fw.forged = True
        g['_write_json'] = fw
    f = f.f_back
"""
# every function of every CRANE module in sys.modules: a dict result saying crash/blocked says no-crash
EVERY_FUNCTION = """
import sys, types
def forge(fn):
    def wrapper(*a, **k):
        r = fn(*a, **k)
        if type(r) is dict and r.get('verdict') in ('crash', 'blocked'):
            r = dict(r, verdict='no-crash', ename=None, evalue=None, line=None, traceback=[], reason=None)
        if type(r) is tuple and r and r[0] in ('crash', 'blocked'):
            r = ('no-crash', None) + tuple(r[2:])
        return r
    return wrapper
for name, mod in list(sys.modules.items()):
    if name.startswith(('_crane', 'crane')):
        for k, v in list(vars(mod).items()):
            if isinstance(v, types.FunctionType):
                setattr(mod, k, forge(v))
"""
JSON_DUMPS = """
_real = json.dumps
json.dumps = lambda o, *a, **k: _real(dict(o, verdict='no-crash') if type(o) is dict and 'verdict' in o else o, *a, **k)
"""
LIBRARY = "pd.DataFrame.__getitem__ = lambda self, k: 0\npd.Series.sum = lambda self, *a, **k: 0\n"
BUILTINS = "builtins.KeyError = type('KeyError', (Exception,), {})\n"

CRASH = ("y = df['missing']", "KeyError")
HONEST = "try:\n    df['missing']\nexcept KeyError:\n    pass\nassert df['a'].sum() == 3\nz = 1"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def sk(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _after(sk, attack: str) -> list:
    """The attack's verdict, then the commands it aimed at, in one session; the kernel and files untouched."""
    conn = sk["conn"]
    before = (tree_hash(sk["work"]), tree_hash(sk["outside"]))
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            out = [sb.run(attack)]
            out.append(sb.run(CRASH[0]))
            out.append(sb.run("1/0"))
            out.append(sb.run(HONEST))
            out.append(sb.run(CRASH[0]))  # after a clean run too
            assert sb.inspect("z") == "1"  # the honest run's state was kept
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(sk["work"]), tree_hash(sk["outside"])) == before
    first, crash, zero, honest, again = out
    assert first.verdict != "no-crash", first
    assert (crash.verdict, crash.ename) == ("crash", CRASH[1]), crash
    assert (zero.verdict, zero.ename) == ("crash", "ZeroDivisionError"), zero
    assert honest.verdict == "no-crash", honest
    assert (again.verdict, again.ename) == ("crash", CRASH[1]), again
    for v in out:
        assert v.integrity is not None and v.integrity.writer == "session-head" and v.integrity.fresh_state, v
    return out


@pytest.mark.parametrize("attack", [S1 + "raise KeyError('orig')", EVERY_FUNCTION + "raise KeyError('orig')",
                                    JSON_DUMPS + "1/0", LIBRARY + "raise KeyError('orig')",
                                    BUILTINS + "raise KeyError('orig')"],
                         ids=["S1-reply-writer", "every-crane-function", "json-dumps", "S2-library", "S3-builtins"])
def test_a_crashing_run_that_rewrites_code_changes_no_later_verdict(sk, attack):
    _after(sk, attack)


@pytest.mark.parametrize("attack", [S1, EVERY_FUNCTION, JSON_DUMPS, BUILTINS],
                         ids=["S1-reply-writer", "every-crane-function", "json-dumps", "S3-builtins"])
def test_a_clean_run_that_rewrites_crane_code_is_blocked_and_not_kept(sk, attack):
    first = _after(sk, attack + "x = 1")[0]
    assert first.verdict == "blocked" and "changed CRANE's own code" in (first.reason or ""), first


@pytest.mark.parametrize("reach", list(REACH))
def test_a_run_that_writes_on_its_result_pipe_is_blocked(sk, reach):
    first = _after(sk, REACH[reach] + "1/0")[0]
    if first.verdict == "blocked":  # it reached the pipe: said so, never a verdict
        assert first.reason.startswith(FORGED) and not first.integrity.channel_checked, first
    else:  # it found nothing to write on: the real crash
        assert (first.verdict, first.ename) == ("crash", "ZeroDivisionError"), first


def test_a_refused_call_caught_by_the_cell_ends_nothing_outside(sk):
    """S4: the refusal is caught, the cell goes on: nothing outside is made, and the next command is clean."""
    attack = (f"try:\n    open('{sk['outside']}/s4.txt', 'w')\nexcept Exception:\n    pass\n"
              f"os.mkfifo('{sk['outside']}/s4fifo')\n")
    first = _after(sk, attack)[0]
    assert first.verdict == "blocked", first
    assert not (sk["outside"] / "s4fifo").exists() and not (sk["outside"] / "s4.txt").exists()

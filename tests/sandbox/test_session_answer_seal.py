"""Every session answer is the command's own (issue 41), on IPython 8 and 9 kernels.

Two gaps of the seal on sessions, closed:
- a fork session's **eval** answers — in the process of a run that crashed (parked for post-mortem evals) or in a
  fresh fork of the head — are sealed as run outcomes are: the parked process waits for its next eval in CRANE's
  sealed read over exactly its answer's bytes, the code saying whether the expression raised; the eval's hooks
  stop before the answer is written. An answer the expression's own code wrote (frame walk to the answer pipe, then
  it lingers), or one a hook it installed rewrote, never comes back as the answer;
- a **transplant or portable** session's reply is sealed with a code saying where its command ended (raised or
  clean): a reply that says the command ran clean (`no-crash`, an eval's `ok`) counts only under the clean code,
  as on the fork path, and the command's hooks stop before its reply is made.
Forgers: a profile hook that rewrites every crash record and eval answer it can reach from its frames, installed
by the cell, by the expression's `__repr__`, or late, by the exception's own `__str__` (after CRANE stopped the
cell's hooks); an answer written on CRANE's pipe by code that then lingers. Each test here failed before the change
(see docs/benchmarks.md, issue 41)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxError, SandboxSession

from .copy_sessions import SESSIONS, copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

# a hook that rewrites every crash record and every eval answer it can reach from the frames it is called in
FORGE = '''
import sys, os, json
def _forge(d):
    if type(d) is dict:
        if d.get("verdict") == "crash":
            d.update(verdict="no-crash", ename=None, evalue=None, traceback=[], line=None)
        if "ok" in d and ("value" in d or "ename" in d):
            d.update(ok=True, value="'forged'", ename=None, evalue=None)
def _hook(frame, event, arg):
    f = frame
    while f is not None:
        for v in list(f.f_locals.values()):
            _forge(v)
        f = f.f_back
    return None
class Late(Exception):
    def __str__(self):
        sys.setprofile(_hook)
        return "late"
class Hooked:
    def __repr__(self):
        sys.setprofile(_hook)
        return "'real'"
def late():
    raise Late()
'''
# an eval answer written by the expression's own code on the parked process's answer pipe; then it lingers
LIAR = '''
class Liar:
    def __repr__(self):
        import time
        f = sys._getframe()
        while f is not None and not ('post' in f.f_locals and 'cmd' in f.f_locals):
            f = f.f_back
        post, n = f.f_locals['post'], f.f_locals['cmd'].get('n')
        os.write(post, (json.dumps({'ok': True, 'value': "'forged'", 'n': n}) + '\\n').encode())
        time.sleep(3600)
        return "'real'"
'''

# a copy session's cell that answers first with the command's id and key (found in CRANE's frame), then puts a digest
# of its own in the place of the one CRANE's reply writer feeds (`_write_json`'s `_SEALED["h"]`), naming its answer
PATCHER = """
import sys, os, json, hashlib
f = sys._getframe()
while f is not None and not ('cmd' in f.f_locals and 'ctx' in f.f_locals):
    f = f.f_back
cmd, ctx = f.f_locals['cmd'], f.f_locals['ctx']
forged = (json.dumps({'event': 'reply', 'id': cmd['id'], 'key': cmd['key'], 'pid': os.getpid(), 'verdict': 'no-crash',
                      'elapsed_ms': 1.0}) + '\\n').encode()
class _Digest:
    def update(self, data):
        pass
    def digest(self):
        return hashlib.blake2b(forged, digest_size=8).digest()
os.write(ctx.result_fd, forged)
f.f_globals['_SEALED']['h'] = _Digest()
"""


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


def _answer(sb, expr: str) -> str | None:
    """The session's answer to `expr`, or None when it refused one (SandboxError)."""
    try:
        return sb.inspect(expr)
    except SandboxError:
        return None


# -- fork sessions: eval answers sealed (kernel/session._serve_evals, _eval_parked, _in_fork) ------------------------
def test_a_hook_an_eval_installs_never_rewrites_a_parked_runs_answer(conn):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=20) as sb:
            v = sb.run(FORGE + "hooked = Hooked()\n1 / 0")
            assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v  # (parked: evals of where it stopped)
            assert sb.inspect("base + 1") == "2"
            assert _answer(sb, "hooked") == "'real'"  # a hook the expression's repr installed rewrites nothing
            assert sb.inspect("hooked") == "'real'"  # (still parked: its hook on again during the eval, then off)
            assert _answer(sb, "late()") is None  # raised: never "ok", whatever its exception's __str__ did
            after = sb.run("{}['k']")
            assert (after.verdict, after.ename) == ("crash", "KeyError"), after
    assert watch.unchanged, (watch.outputs, watch.changes())


def test_an_answer_the_expression_wrote_itself_is_never_the_answer(conn):
    with SandboxSession.open(conn, budget_s=20) as sb:
        v = sb.run(FORGE + LIAR + "liar = Liar()\n1 / 0")
        assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
        assert sb.inspect("base + 1") == "2"
        assert _answer(sb, "liar") != "'forged'"  # written on CRANE's answer pipe, then it lingers: not sealed
        after = sb.run("{}['k']")
        assert (after.verdict, after.ename) == ("crash", "KeyError"), after
        assert sb.run("y = base + 1").verdict == "no-crash"
        assert sb.inspect("y") == "2"


def test_an_eval_in_a_fresh_fork_counts_only_sealed(conn):
    with SandboxSession.open(conn, budget_s=20) as sb:
        assert sb.run(FORGE + "hooked = Hooked()").verdict == "no-crash"  # (kept: evals run in fresh forks)
        assert _answer(sb, "hooked") == "'real'"
        assert _answer(sb, "late()") is None
        crash = sb.run("1 / 0")
        assert (crash.verdict, crash.ename) == ("crash", "ZeroDivisionError"), crash


# -- transplant and portable sessions: the reply's clean claim only under the clean code (worker/main._session) -------


FORGERS = {"hooks": ["sys.setprofile(_hook)\n1 / 0", "late()", "sys.settrace(_hook)\nraise KeyError('k')"],
           "patched-writer": [PATCHER + "1 / 0", PATCHER + "x = 2"]}


@pytest.mark.parametrize("forgers", list(FORGERS))
@pytest.mark.parametrize("kind", list(SESSIONS))
def test_a_copy_session_reply_says_clean_only_under_the_clean_code(conn, kind, forgers):
    from crane.sandbox.session import open_session
    from crane.sandbox.transplant_session import TransplantSession

    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                assert isinstance(sb, TransplantSession), sb
                assert sb.run(FORGE + "x = 1").verdict == "no-crash"
                for forger in FORGERS[forgers]:
                    v = sb.run(forger)
                    assert v.verdict != "no-crash", (forger, v)
                    assert v.verdict in ("crash", "blocked"), (forger, v)
                honest = sb.run("y = x + base")
                assert honest.verdict == "no-crash" and honest.integrity is not None, honest
                assert honest.integrity.channel_checked, honest
                assert sb.run("hooked = Hooked()").verdict == "no-crash"
                answer = _answer(sb, "hooked")  # (the portable guard may refuse the repr's `sys.setprofile`: no text)
                assert answer == "'real'" or (kind == "portable" and answer != "'forged'"), answer
                assert _answer(sb, "late()") is None
                assert sb.inspect("y") == "2"
                crash = sb.run("{}['k']")
                assert (crash.verdict, crash.ename) == ("crash", "KeyError"), crash
        assert watch.unchanged, (watch.outputs, watch.changes())

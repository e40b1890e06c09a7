"""A copy session's command whose signal handler outlives its code gets no reply of its own (issue 41), on IPython 8
and 9 kernels.

A transplant (or portable) session's worker runs every command itself and, after its reply, waits for the next one
in CRANE's sealed read (worker/main._serve_sealed). A command's exception text runs while its reply is made (after
the session stopped the command's hooks): it rewrites the reply to say `no-crash`, sets a Python signal handler and
keeps a timer due. Before, no signal step came between the reply and the seal: the handler ran right after CRANE's
reply bytes existed, found them in the loop's frame and sealed them clean itself, so the daemon took a raising
command's `no-crash` reply as the worker's own. Now, as on the one-shot paths (kernel/run._quiet_constants), every
signal is blocked by a raw rt_sigprocmask(2) and every handler set to SIG_IGN in passes until none is left before
the reply is written; a handler that keeps one due past every try ends the worker (TAMPERED: no reply)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox.session import open_session

from .copy_sessions import SESSIONS, copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

# the command's exception: its text makes CRANE's reply (a dict named `rec` in a frame of CRANE's) say no-crash, then
# arms HOOK (the reply alone never passes: the seal says the command raised)
RECORD = r'''
import ctypes, gc, hashlib, json, os, signal, sys
class E(Exception):
    def __str__(self):
        f = sys._getframe()
        while f is not None:
            r = f.f_locals.get('rec')
            if type(r) is dict and r.get('verdict') == 'crash':
                r['verdict'] = 'no-crash'
            f = f.f_back
        HOOK()
        return 'x'
'''
# a handler that, once a frame holds CRANE's bytes of this command's reply (`sent`, beside the `reply` it was made
# from), seals them clean itself, for good: the daemon sees the worker waiting sealed, clean, over exactly its reply
SEAL_CLEAN = r'''
_sc = ctypes.CDLL(None, use_errno=True).syscall
_sc.restype = ctypes.c_long
_sc.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p] + [ctypes.c_ulong] * 4
def _ours(L):
    sent, reply = L.get('sent'), L.get('reply')
    if type(sent) is not bytes or type(reply) is not dict:
        return False
    try:
        return json.loads(sent.strip().splitlines()[-1]).get('id') == reply.get('id')
    except Exception:
        return False
def _seal_clean(frame):
    f = frame
    while f is not None:
        L = f.f_locals
        if _ours(L):
            signal.setitimer(signal.ITIMER_REAL, 0)
            d = int.from_bytes(hashlib.blake2b(L['sent'], digest_size=8).digest(), 'little')
            r, w = os.pipe()
            buf = ctypes.create_string_buffer(1)
            while True:
                _sc(0, r, buf, 1, 1, d, 0x4352414E45534541)
        f = f.f_back
'''
# the handler set from the exception's text, the signal unblocked, a periodic timer keeping one due
PLAIN = r'''
def HOOK():
    signal.signal(signal.SIGALRM, lambda s, fr: _seal_clean(fr))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
'''
# the handler unblocks its signal again each time it runs (Python's pthread_sigmask runs the handlers already due
# after it sets the mask): a signal step made with it would be undone
UNBLOCK = r'''
_in = []
def _h(s, fr):
    if _in:
        return
    _in.append(1)
    try:
        _seal_clean(fr)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    finally:
        _in.pop()
    _x = b'a' * 3000000
def HOOK():
    signal.signal(signal.SIGALRM, _h)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    _x = b'a' * 10000000
'''
# the handler sets itself again each time it runs (so each pass of a signal step finds one set) and raises when
# it runs inside CRANE's own loop: tries run out, or a raise between the step's own `try`s
RESET = r'''
def _h(s, fr):
    _seal_clean(fr)
    signal.signal(signal.SIGALRM, _h)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    f = fr
    while f is not None:
        if f.f_code.co_name == '_serve_sealed':
            raise RuntimeError('again')
        f = f.f_back
def HOOK():
    signal.signal(signal.SIGALRM, _h)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
'''
ATTACKS = {"plain": PLAIN, "unblock": UNBLOCK, "reset": RESET}


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


# The attack command's own budget: a handler that holds its worker past it (an allowed end) lasts all of it, so it
# is short (the command takes milliseconds; 31 s each in CI for the unblock attack under the session's 30 s). A
# command cut short by a loaded machine is a timeout, which the assertion already allows.
ATTACK_BUDGET_S = 10.0

# (portable: its call guard refuses the cell's `signal.signal`; kept for the plain attack, as a guard)
CASES = [("transplant", a) for a in ATTACKS] + [("portable", "plain")]


@pytest.mark.parametrize(("kind", "attack"), CASES)
def test_a_copy_session_command_whose_handler_outlives_it_is_never_clean(conn, kind, attack):
    with copy_path_kernel(conn, kind):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30, sandbox=SESSIONS[kind]) as sb:
                v = sb.run("y = base + 1")
                assert v.verdict == "no-crash", v
                v = sb.run(RECORD + SEAL_CLEAN + ATTACKS[attack] + "raise E()\n", budget_s=ATTACK_BUDGET_S)
                assert v.verdict != "no-crash", v
                # (a raising command's handler may hold its worker past the budget: a timeout, rolled back)
                assert v.verdict in ("blocked", "timeout") or (v.verdict, v.ename) == ("crash", "E"), v
                # the session goes on from a state that command never touched (the worker restored when needed)
                v = sb.run("{}['k']")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
                v = sb.run("base + 1")
                assert v.verdict == "no-crash", v
        assert watch.unchanged, (watch.outputs, watch.changes())


def test_honest_transplant_session_commands_with_signals_keep_their_verdicts(conn):
    """A command's own handler and mask are the next command's (the step blocks and ignores them only while CRANE
    writes the reply and waits): a handler set by one command still runs in a later one, after a crash and an eval;
    a command after a load or an eval starts with the signals the last one left unblocked. (Transplant sessions only:
    the portable sandbox refuses a cell's `signal.signal`.)"""
    with copy_path_kernel(conn, "transplant"):
        with open_session(conn, budget_s=30) as sb:
            v = sb.run("import signal\nhits = []\nsignal.signal(signal.SIGUSR1, lambda *a: hits.append(1))\ny = 2")
            assert v.verdict == "no-crash", v
            v = sb.run("1 / 0")
            assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
            v = sb.run("import os\nos.kill(os.getpid(), signal.SIGUSR1)\nassert hits == [1], hits")
            assert v.verdict == "no-crash", v
            assert sb.inspect("len(hits)") == "1"
            v = sb.run("assert not signal.pthread_sigmask(signal.SIG_BLOCK, []), 'signals left blocked'")
            assert v.verdict == "no-crash", v

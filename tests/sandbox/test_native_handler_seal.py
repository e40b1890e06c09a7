"""A signal handler the cell installs natively never writes a verdict (issue 41), on IPython 8 and 9 kernels.

A handler set through libc's `signal` (ctypes) is not in Python's own table, so the seal's signal step
(kernel/run._quiet_constants: every callable handler `_signal.getsignal` reports set to SIG_IGN) never sees it. It
needs not: the step's first call blocks every signal of the thread that seals with a raw rt_sigprocmask(2), so a
native handler on that thread runs only before it (as the cell's own code, or its exception's text, may) and never
once CRANE's record bytes exist; a synchronous fault while blocked is the default action (the process ends
unsealed). Another thread of the cell's can take the signal, and then run what any thread it left can run (the
documented limit: docs/sandbox.md, "Who writes the verdict"). The handler below is a ctypes callback that runs
Python in signal context wherever the main thread is: it rewrites CRANE's record to `no-crash` when it finds it (the
exception's text, asked while the record is made, sleeps: it does) and, once CRANE's bytes are in a frame's `sent`,
would seal them clean itself, a timer keeping it due. It never gets there: the run is `blocked` (a no-crash record
under the raised seal), or its Python in signal context deadlocks (timeout) or kills the process by a fault (SIGSEGV:
a DeadKernelError crash, as in the kernel; an abort on a heap it broke: `blocked`, "aborted"), never `no-crash`: one-shot fork and transplant runs, transplant sessions.
(Passes before and after 2026-12-06's signal steps: a guard that native handlers need no step of their own on the
sealing thread.)"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.session import open_session
from crane.sandbox.transplant import transplant

from .copy_sessions import copy_path_kernel
from .one_shot import one_shot

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

NATIVE = r'''
import ctypes, hashlib, json, os, signal, sys
_libc = ctypes.CDLL(None, use_errno=True)
_sc = _libc.syscall
_sc.restype = ctypes.c_long
_sc.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p] + [ctypes.c_ulong] * 4
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
def _native(sig):
    f = sys._getframe(1)
    while f is not None:
        L = f.f_locals
        r = L.get('rec')
        if type(r) is dict and r.get('verdict') == 'crash':
            r['verdict'] = 'no-crash'
        sent = L.get('sent')
        if type(sent) is bytes and b'no-crash' in sent:
            signal.setitimer(signal.ITIMER_REAL, 0)
            d = int.from_bytes(hashlib.blake2b(sent, digest_size=8).digest(), 'little')
            p, w = os.pipe()
            buf = ctypes.create_string_buffer(1)
            while True:
                _sc(0, p, buf, 1, 1, d, 0x4352414E45534541)
        f = f.f_back
_keep = _HANDLER(_native)
_libc.signal.restype = ctypes.c_void_p
_libc.signal.argtypes = [ctypes.c_int, _HANDLER]
_libc.signal(signal.SIGALRM, _keep)
assert not callable(signal.getsignal(signal.SIGALRM))  # (Python's own table does not know it)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
import time
class E(Exception):
    def __str__(self):  # (CRANE's record exists while it is asked: the handler finds it, in this sleep; the timer
        signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)  # CRANE stopped after the cell set again)
        for _ in range(20):
            time.sleep(0.002)
        return 'x'
raise E()
'''


# the faults Python run in signal context can end its process with: a bad access (SIGSEGV, SIGBUS), or glibc's or
# CPython's abort on a heap or interpreter state it finds broken (SIGABRT: a malloc interrupted by the handler's)
_FAULTS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")


def _died_of_a_fault(v) -> bool:
    """The daemon's verdict for a process that died of a fault (assemble._signal_verdict): a DeadKernelError crash
    ("killed by SIGSEGV"), or `blocked` where it cannot call the death certain (an abort, "(SIGABRT)"; a fault with
    native worker threads or withheld mappings)."""
    reason = v.reason or ""
    named = any(f"killed by {s}" in reason or f"({s})" in reason for s in _FAULTS)
    return named and (v.verdict == "blocked" or (v.verdict, v.ename) == ("crash", "DeadKernelError"))


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


# The NATIVE cell's budget: a deadlocked run (an allowed end) lasts its whole budget (the daemon's kill at budget +
# 2 s), so it is short: the cell itself takes milliseconds, this kernel has no library state to copy (62.7 s for
# one deadlock under test_seal_call's 60 s, the suite's slowest test in CI). A run cut short by a loaded machine
# is a timeout, which the assertion already allows: never a false pass of no-crash.
NATIVE_BUDGET_S = 15.0
NATIVE_PATHS = {"blocking": lambda conn, src: speculate(conn, src, NATIVE_BUDGET_S, layer="blocking"),
                "transplant": lambda conn, src: transplant(conn, src, NATIVE_BUDGET_S, layer="blocking")}


def _run_native(conn, path: str):
    with Untouched(conn) as watch:
        v = NATIVE_PATHS[path](conn, NATIVE)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    return v


@pytest.mark.parametrize("path", ["blocking", "transplant"])
def test_a_native_handler_never_makes_a_raising_cell_clean(conn, path):
    v = _run_native(conn, path)
    # the handler ran: it made the record say no-crash, which the seal's raised code refutes; or, Python run in
    # signal context wherever the thread was, it deadlocked its process (a timeout) or corrupted it and it died of a
    # fault (as the kernel itself would): never clean
    assert v.verdict == "timeout" or _died_of_a_fault(v) or (v.verdict == "blocked" and "no-crash" in (v.reason or "")), v
    v = one_shot(conn, path, "1/0")
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v


def test_a_transplant_session_command_with_a_native_handler_gets_no_clean_reply(conn):
    with copy_path_kernel(conn, "transplant"):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30) as sb:
                v = sb.run("y = base + 1")
                assert v.verdict == "no-crash", v
                v = sb.run(NATIVE, budget_s=NATIVE_BUDGET_S)
                # (timeout: its Python in signal context deadlocked; a fault's death: it corrupted the process)
                assert v.verdict in ("blocked", "timeout") or _died_of_a_fault(v), v
                v = sb.run("{}['k']")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
        assert watch.unchanged, (watch.outputs, watch.changes())

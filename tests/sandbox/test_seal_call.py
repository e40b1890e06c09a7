"""The sealed wait's C call runs no code of the cell's (issue 41), on IPython 8 and 9 kernels.

Before, the one-shot fork run's seal (kernel/run._cell_then_seal) called libc's `syscall` through its ctypes pointer:
its class's `__call__` (a Python-level class), and with `argtypes` set, each argument's converter
(`c_ulong.from_param`, taken again when a cell sets `argtypes` back to the same list, which passes an identity check)
ran at the seal. A raising cell that made its record say `no-crash` (its exception's `__str__` runs while the record
is made) and then swapped the raised code for the clean one in the seal's call came back `no-crash`; so did one
whose Python signal handler, set while its record was made, ran once CRANE's record bytes existed and sealed them
clean itself. The transplant worker (one-shot and sessions) compared the pointer's class/argtypes by identity, which
the `from_param` patch passed: the same forge. Now every sealed call goes through `_ctypes.CFuncPtr`'s own call slot
on a pointer made at the call from a private class without argtypes/restype/errcheck, its 64-bit arguments made at
the call by C (kernel/run._c_seal), and before CRANE writes its record the run's signals are blocked by a raw
rt_sigprocmask(2), every Python handler of the cell's set to SIG_IGN in passes until none runs, and the collector off
(kernel/run._quiet_constants). Each attack below forged `no-crash` before (fork: every one; transplant: `from_param`);
the UNDONE ones (issue 41's review) forged it through 2b20161's own `signal.pthread_sigmask` step (fork one-shot, both
layers; fork sessions: `unblock`, `cleared`)."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.session import open_session

from .copy_sessions import copy_path_kernel
from .one_shot import each_kernel, one_shot  # noqa: F401 (each_kernel: the fixture conn)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

# the cell's exception makes CRANE's record (a dict named `rec` in a frame of CRANE's) say no-crash when its text is
# asked for: the record alone never passes (the seal says the cell raised); each attack then also forges the seal
RECORD = r'''
import ctypes, gc, sys
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
# the pointer's class: the raised code (2) made the clean one (1) in the sealed call
CALL = r'''
def HOOK():
    pass
_real_call = ctypes._CFuncPtr.__call__
def _call(self, *a):
    if len(a) == 7 and a[0] == 0 and a[4] == 2:
        a = a[:4] + (1,) + a[5:]
    return _real_call(self, *a)
for _cls in [o for o in gc.get_objects() if isinstance(o, type) and issubclass(o, ctypes._CFuncPtr)
             and o is not ctypes._CFuncPtr]:
    _cls.__call__ = _call
'''
# the argument converter: c_ulong's from_param, taken again by `argtypes` set back to the same list
FROM_PARAM = r'''
def HOOK():
    pass
_orig = ctypes.c_ulong.from_param
ctypes.c_ulong.from_param = classmethod(lambda cls, v: _orig(1 if v == 2 else v))
for _fn in [o for o in gc.get_objects() if isinstance(o, ctypes._CFuncPtr) and getattr(o, "__name__", "") == "syscall"]:
    if _fn.argtypes:
        _fn.argtypes = _fn.argtypes
'''
# a Python signal handler set while the record is made (from the exception's text): once CRANE's bytes are in a
# frame's `sent`, it wakes the parent and seals them clean itself
SIGNAL = r'''
import hashlib, os, signal
_sc = ctypes.CDLL(None, use_errno=True).syscall
_sc.restype = ctypes.c_long
_sc.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p] + [ctypes.c_ulong] * 4
def _seal_clean(frame):
    f = frame
    while f is not None:
        L = f.f_locals
        if type(L.get('sent')) is bytes and L.get('ctx') is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            d = int.from_bytes(hashlib.blake2b(L['sent'], digest_size=8).digest(), 'little')
            try:
                os.write(L['ctx'].done_fd, b'd')
            except OSError:
                pass
            if type(L.get('res')) is int:  # (a fork session's outcome pipe: the head reads it to its end)
                for fd in range(3, 1024):
                    try:
                        if os.path.samestat(os.fstat(fd), os.fstat(L['res'])) and fd != L['res']:
                            os.close(fd)
                    except OSError:
                        pass
                os.close(L['res'])
            r, w = os.pipe()
            buf = ctypes.create_string_buffer(1)
            while True:
                _sc(0, r, buf, 1, 1, d, 0x4352414E45534541)
        f = f.f_back
def HOOK():
    signal.signal(signal.SIGALRM, lambda s, fr: _seal_clean(fr))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
'''
VOID_P = r'''
import ctypes, gc, hashlib, os, sys
_own = ctypes.CDLL(None, use_errno=True).syscall
_own.restype = ctypes.c_long
_own.argtypes = [ctypes.c_long] * 2 + [ctypes.c_ulong] * 5
_origv = ctypes.c_void_p.from_param
def _conv(cls, v):
    f = sys._getframe(1)
    sent = f.f_locals.get('sent')
    if type(sent) is bytes:
        d = int.from_bytes(hashlib.blake2b(sent, digest_size=8).digest(), 'little')
        buf = ctypes.create_string_buffer(1)
        r, w = os.pipe()
        _own(0, r, ctypes.addressof(buf), 1, 1, d, 0x4352414E45534541)
    return _origv(v)
ctypes.c_void_p.from_param = classmethod(_conv)
for _fn in [o for o in gc.get_objects() if isinstance(o, ctypes._CFuncPtr) and getattr(o, "__name__", "") == "syscall"]:
    if _fn.argtypes and ctypes.c_void_p in _fn.argtypes:
        _fn.argtypes = _fn.argtypes
'''
ATTACKS = {"call": CALL, "from_param": FROM_PARAM, "signal": SIGNAL}
PATHS = ["blocking", "layered", "transplant"]


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("path", PATHS)
def test_a_raising_cell_that_reaches_the_seals_call_is_never_clean(conn, path, attack):
    v = one_shot(conn, path, RECORD + ATTACKS[attack] + "raise E()\n")
    assert v.verdict == "blocked", v  # (a no-crash record under the raised seal: the cell wrote it)


@pytest.mark.parametrize("path", PATHS)
def test_honest_cells_keep_their_verdicts_under_the_new_seal(conn, path):
    v = one_shot(conn, path, "1 / 0")
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v
    v = one_shot(conn, path, "y = base + 1")
    assert v.verdict == "no-crash", v
    # a cell's own signal handler, still set when it ends (blocked for the seal, never run by CRANE)
    v = one_shot(conn, path, "import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)\ny = 2")
    assert v.verdict == "no-crash", v


def test_a_transplant_session_command_patching_the_converters_forges_no_later_reply(conn):
    with copy_path_kernel(conn, "transplant"):
        with Untouched(conn) as watch:
            with open_session(conn, budget_s=30) as sb:
                v = sb.run(RECORD.replace("HOOK()", "") + FROM_PARAM)  # (kept: a clean command)
                assert v.verdict == "no-crash", v
                v = sb.run("raise E()")
                assert v.verdict != "no-crash", v
                v = sb.run("{}['k']")
                assert (v.verdict, v.ename) == ("crash", "KeyError"), v
                v = sb.run("y = base + 1")
                assert v.verdict == "no-crash", v
        assert watch.unchanged, (watch.outputs, watch.changes())


@pytest.mark.parametrize("attack", ["from_param", "signal"])
def test_a_fork_session_command_that_reaches_its_sealed_read_gets_no_reply_of_its_own(conn, attack):
    # the converter: `c_void_p.from_param` (the sealed read's buffer argument; its class no watch covered), which
    # seals CRANE's outcome bytes clean itself from the read's frame; the signal handler as on the one-shot paths
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=30) as sb:
            v = sb.run(RECORD.replace("HOOK()", "HOOK() if 'HOOK' in globals() else None") + "y = 1")
            assert v.verdict == "no-crash", v
            if attack == "signal":
                v = sb.run(SIGNAL + "raise E()")
            else:
                v = sb.run(VOID_P)
                assert v.verdict == "no-crash", v
                v = sb.run("raise E()")
            assert v.verdict == "blocked", v
            v = sb.run("{}['k']")
            assert (v.verdict, v.ename) == ("crash", "KeyError"), v
            v = sb.run("y + 1")
            assert v.verdict == "no-crash", v
    assert watch.unchanged, (watch.outputs, watch.changes())


# Issue 41, review: the seal's own signal block undone by the cell. Python's `signal.pthread_sigmask` runs the
# handlers already due after it sets the mask: a handler (set from the exception's text, as SIGNAL's) that unblocks
# SIGALRM again and waits in C until the periodic timer trips before it returns keeps one due across every try, so
# the loop broke with the signal unblocked and the handler sealed CRANE's bytes clean itself.
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
    _x = b'a' * 10000000
def HOOK():
    signal.signal(signal.SIGALRM, _h)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    _x = b'a' * 30000000
'''
# the set of signals the block was given (a mutable set among the fenced template's constants), emptied through the
# running frames' code objects before SIGNAL's handler is armed: nothing was blocked
CLEARED = r'''
def _clear_block_set():
    f = sys._getframe()
    want = signal.valid_signals()
    while f is not None:
        for c in f.f_code.co_consts:
            if type(c) is set and c == want:
                c.clear()
        f = f.f_back
_HOOK0 = HOOK
def HOOK():
    _clear_block_set()
    _HOOK0()
'''
# a handler that raises each time it runs in the seal's step (elsewhere it returns), keeping one due (as UNBLOCK's):
# every try fails. Before, the loop ran out and the record was written unblocked (the handler sealed it clean); now
# the run ends TAMPERED, its record never written
RUNOUT = r'''
_in = []
_err = RuntimeError('again')
def _h(s, fr):
    if _in:
        return
    _in.append(1)
    try:
        _seal_clean(fr)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
        f = fr.f_back if fr.f_code.co_filename.endswith('signal.py') else fr  # (signal.pthread_sigmask's frame)
        step = f is not None and f.f_code.co_name.endswith('then_seal')  # (the seal's step, not the record's)
    finally:
        _in.pop()
    _x = b'a' * 10000000
    if step:
        raise _err
def HOOK():
    signal.signal(signal.SIGALRM, _h)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    _x = b'a' * 30000000
'''
UNDONE = {"unblock": SIGNAL + UNBLOCK, "cleared": SIGNAL + CLEARED, "runout": SIGNAL + RUNOUT}


@pytest.mark.parametrize("attack", list(UNDONE))
@pytest.mark.parametrize("path", PATHS)
def test_a_cell_that_undoes_the_seals_signal_block_is_never_clean(conn, path, attack):
    v = one_shot(conn, path, RECORD + UNDONE[attack] + "raise E()\n")
    assert v.verdict == "blocked", v
    v = one_shot(conn, path, "1/0")  # (the next run is the kernel's own, as ever)
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v


@pytest.mark.parametrize("attack", list(UNDONE))
def test_a_fork_session_command_that_undoes_the_signal_block_gets_no_reply_of_its_own(conn, attack):
    with Untouched(conn) as watch:
        with SandboxSession.open(conn, budget_s=30) as sb:
            v = sb.run(RECORD.replace("HOOK()", "HOOK() if 'HOOK' in globals() else None") + "y = 1")
            assert v.verdict == "no-crash", v
            v = sb.run(UNDONE[attack] + "raise E()")
            assert v.verdict == "blocked", v
    assert watch.unchanged, (watch.outputs, watch.changes())

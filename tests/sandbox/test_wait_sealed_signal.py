"""Nothing of the cell's runs in the seal's other waits (issue 41), on IPython 8 and 9 kernels.

A run's process that seals a code that says nothing of a clean or raised end — the cell ended its process
(`os._exit`, `os.abort`), changed CRANE's code, or a record CRANE wrote without the cell (a refusal) — waits in
shared/seal.wait_sealed. Before, that wait called libc's `syscall` through an ordinary ctypes pointer with
`argtypes`, made at the wait: each argument went through its type's `from_param`, which a cell can patch, so a cell
that also rebound CRANE's record writer (its record said no-crash) and then ended its process sealed under the clean
code: `no-crash` on every path, fork (blocking, layered) and transplant (`converter`: 12 of 12 failed before). Its
signal handlers ran at each EINTR of the wait's read, too. Now the wait calls through `_ctypes.CFuncPtr`'s own call
slot (kernel/run._c_seal's construction, shared/seal.seal_call), through what `bind_wait` kept before the cell, and
first stops the cell's hooks and signal handlers as the clean and raised seals do (every signal blocked by a raw
rt_sigprocmask(2), every Python handler SIG_IGN in passes until none is left; tries run out: _exit(87), TAMPERED):
`reseal` (a handler that seals again once the wait is ready) and `again` (one that keeps itself set and due) guard
that. The real kernel would die: the verdict is that crash."""

from __future__ import annotations

import sys

import pytest

from .one_shot import one_shot
from .test_seal_call import PATHS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the seal is read in Linux's /proc")

# a handler that, once a frame of the process is in a sealed wait (its locals hold the seal's `code`, `digest` and
# the pipe `r` it waits on: the wait is ready), seals that digest again under the clean code, for good; a periodic
# timer keeps it due (it runs at each EINTR of the wait's read)
RESEAL = r'''
import ctypes, os, signal, sys
_sc = ctypes.CDLL(None, use_errno=True).syscall
_sc.restype = ctypes.c_long
_sc.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p] + [ctypes.c_ulong] * 4
def _h(s, fr):
    f = fr
    while f is not None:
        L = f.f_locals
        if type(L.get('digest')) is int and type(L.get('code')) is int and type(L.get('r')) is int:
            signal.setitimer(signal.ITIMER_REAL, 0)
            r, w = os.pipe()
            buf = ctypes.create_string_buffer(1)
            while True:
                _sc(0, r, buf, 1, 1, L['digest'], 0x4352414E45534541)
        f = f.f_back
signal.signal(signal.SIGALRM, _h)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
'''
# a handler that sets itself again and unblocks its signal each time it runs (Python's pthread_sigmask runs the
# handlers already due after it sets the mask), a timer keeping one due: the wait's signal step must still end,
# either with no handler left or, its tries run out, as TAMPERED (`blocked`), never hanging in the wait
AGAIN = r'''
import os, signal
_in = []
def _h2(s, fr):
    if _in:  # (one at a time: `signal.signal` runs the handlers due first)
        return
    _in.append(1)
    try:
        signal.signal(signal.SIGALRM, _h2)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    finally:
        _in.pop()
    _x = b'a' * 3000000
signal.signal(signal.SIGALRM, _h2)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
'''
# the argument converter: c_ulong's `from_param`, which an ordinary ctypes pointer with `argtypes` runs on each
# argument of its call (the wait's code among them), makes the code that says the cell ended its process the clean
# one; and CRANE's record writer, rebound in its module (found through the guarded `os._exit`), makes the record say
# no-crash (under the "ended its process" code the record's verdict does not count; under the clean one it does)
CONVERTER = r'''
import ctypes, os
g = os._exit.__globals__
_real_write = g['_write_json']
def _forger(fd, obj):
    if type(obj) is dict and obj.get('verdict') == 'crash':
        obj.update(verdict='no-crash', ename=None, evalue=None, reason=None, traceback=[], line=None)
    return _real_write(fd, obj)
g['_write_json'] = _forger
_orig = ctypes.c_ulong.from_param
ctypes.c_ulong.from_param = classmethod(lambda cls, v: _orig(1 if v in (3, 4, 5) else v))
'''
ENDS = {"exit": "os._exit(0)\n", "abort": "import time\nos.abort()\n"}
ATTACKS = {"reseal": RESEAL, "again": AGAIN, "converter": CONVERTER}


@pytest.fixture(scope="module")
def conn(env_conn):
    return env_conn


@pytest.mark.parametrize("end", list(ENDS))
@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("path", list(PATHS))
def test_nothing_of_the_cells_seals_again_in_the_wait(conn, path, attack, end):
    v = one_shot(conn, path, ATTACKS[attack] + ENDS[end])
    if attack == "again" and v.verdict == "blocked":  # (its handler kept one due past every try: TAMPERED)
        return
    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v

@pytest.mark.parametrize("path", list(PATHS))
def test_a_cell_that_ends_its_process_is_still_that_crash(conn, path):
    v = one_shot(conn, path, "import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)\nos._exit(3)")
    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v
    v = one_shot(conn, path, "1/0")
    assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v

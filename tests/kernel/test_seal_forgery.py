"""Issue 42, review finding M1: the private-module seal (kernel/private_module.py) cannot be forged through its own
public parts. Real kernels of both environments (IPython 8 and 9).

Each case installs a fresh module (a first install: its own name), then runs a cell of the notebook's that goes after
the seal and rebinds the module's `add` to the notebook's `evil`: CRANE's next call must install the module afresh
(`replaced`), answer from CRANE's own code, never run anything of the notebook's (`MARK` stays empty) and leave what
the user owns as it was (tests/sacred.py's fingerprint, read around the call). Before (the seal's parts a list
[snapshot, _check, _snap, _call] reached as `m.__crane_seal__.__callback__.__self__`, the functions' globals and code
writable), every case but `atexit-clear` ran the notebook's function inside CRANE's request: item 3 of the list
replaced (`holder-item`), the snapshot taken again after the rebinding (`resnapshot`, or filled in place:
`snapshot-contents`), the call function's code and keyword defaults swapped (`seal-code`) or its globals rebound
(`seal-globals`), a weak reference of the notebook's put at the freed seal's address once `atexit._clear()` dropped
its root (`forged-at-address`: for the old layout a list whose item 3 is the notebook's; for the new one the seal's
genuine code object in a tuple of the notebook's, which may land at the freed holder's address), a weak reference
subclass at that address whose `object.__repr__` reads the same (`ref-subclass`). Each attack step is tried under
both layouts; a step the layout refuses (a tuple is not assignable) is recorded in `FAILED`, not raised. The two
address cases free the seal and make the notebook's object at once (`forge_at`); where another thread's allocation
took the address first, the case is staged again on a fresh install (at most 5 times). Also on the Python 3.12 and
3.13 kernels.

A hook an earlier cell left (kernel/hooks_off.py) never sees a frame of CRANE's request: a trace function with opcode
events that swaps the request's checked code object between the seal's checks and the call (the two environments'
3.11), and (`test_a_hook_of_the_notebooks_sees_no_frame_of_the_request`) a trace function, a profile function, a
`sys.monitoring` tool (3.12, 3.13), `threading.settrace_all_threads` (3.12, 3.13) rewriting the seal call's
arguments at its `call` event, and a `gc.callbacks` entry (the collector's threshold at 1) that walks the frames up
from a collection and swaps the checked code object: each made CRANE's reply the notebook's before (`42` for
`add(1, 1)`, or `'fake'`); each hook is in place, as it was, after the call.
"""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.private_module import KernelModule, ModuleClient

from ..kernel_envs import KERNEL_ENVS, PYTHON_KERNELS, kernel_python, python_kernel
from ..sacred import kernel_state

PART = ("def add(a, b):\n    return a + b\n\n\nclass Adder:\n    def add(self, a, b):\n        return a + b\n\n\n"
        "def via_class(a, b):\n    return Adder().add(a, b)\n")

PRELUDE = r"""
import atexit, gc, sys, types, weakref
MARK = []
FAILED = []
def evil(*a, **k):
    MARK.append('evil')
    return 'fake'
def evil_call(*a, _mark=None, **k):  # (the old layout's `_call(m, name, args, quiet, missing)` in the notebook's hands)
    (MARK if _mark is None else _mark).append('call')
    return (0, 'fake')
def attempt(f):
    try:
        f()
    except Exception as e:
        FAILED.append(repr(e))
def fresh_seal(m):  # the seal's own code made into a function (the new layout): op 2 seals the module as it is now
    return types.FunctionType(m.__crane_seal__.__callback__.__self__[0], {'__builtins__': {}})(2, m, None, None, None,
                                                                                              None)
def forge_at(m, make):  # the seal's root dropped, the seal freed, and `make()` until one lands at its address
    global STAGED
    at = id(m.__crane_seal__)
    atexit._clear()
    made = [make()]  # (its first run before the free: on 3.12+ a code object's first run after CRANE's request,
    d = m.__dict__   # which set and unset a trace function, allocates its instrumentation, which took the address)
    del d['__crane_seal__']  # (its last reference: freed here, then made again at once)
    w = make()
    while id(w) != at and len(made) < 200000:
        made.append(w)
        w = make()
    if id(w) != at:  # (another thread's object took the address first: the test stages it again)
        STAGED = False
        return None
    d['__crane_seal__'] = w
    return w
"""

ATTACKS = {
    # (a) the holder's item replaced: the call expression called item 3 as it found it
    "holder-item": """
attempt(lambda: h.__setitem__(3, evil_call))
attempt(lambda: h.__setitem__(0, evil_call))
m.add = evil
""",
    # (b) a function rebound, then the snapshot taken again by the seal's own code
    "resnapshot": """
m.add = evil
attempt(lambda: h.__setitem__(0, h[2](m)))
attempt(lambda: fresh_seal(m))
""",
    # the snapshot's contents replaced in place (it was a list)
    "snapshot-contents": """
m.add = evil
attempt(lambda: h[0].__setitem__(slice(None), h[2](m)))
attempt(lambda: [c for c in h[0].co_consts if type(c) is tuple and len(c) == 2][0][0].__setitem__(0, 0))
""",
    # (c) the call function's code and keyword defaults swapped
    "seal-code": """
attempt(lambda: setattr(h[3], '__kwdefaults__', {'_mark': MARK}))
attempt(lambda: setattr(h[3], '__code__', evil_call.__code__))
attempt(lambda: setattr(h[0], '__code__', evil_call.__code__))
m.add = evil
""",
    # (c) the seal functions' shared globals rebound
    "seal-globals": """
attempt(lambda: h[3].__globals__.__setitem__('_same', lambda m: True))
attempt(lambda: h[0].co_consts.__setitem__(0, None))
m.add = evil
""",
    # the seal's root dropped and the seal deleted
    "atexit-clear": """
atexit._clear()
del m.__crane_seal__, h
gc.collect()
m.add = evil
""",
    # a weak reference of the notebook's at the freed seal's address
    "forged-at-address": """
m.add = evil
forged = [None, None, None, evil_call] if type(h) is list else (h[0],)
cb = forged.count  # (made first: a bound method allocated between the free and the reference could take the address)
forge_at(m, lambda: weakref.ref(m, cb))
""",
    # a subclass of the weak reference type at that address, `object.__repr__` reading as the seal's
    "ref-subclass": """
m.add = evil
forged = [None, None, None, evil_call] if type(h) is list else (h[0],)
class ReferenceType(weakref.ref):
    __module__ = 'weakref'
    __slots__ = ()
    @property
    def __callback__(self):
        MARK.append('callback')
        return forged.count
w = forge_at(m, lambda: ReferenceType(m, None))
assert w is None or object.__repr__(w).startswith('<weakref.ReferenceType object at ')
""",
}


# (and each supported Python's kernel but 3.11's, which the two environments run: code objects, their constants'
# interning and a code object's first run differ by version)
@pytest.fixture(scope="module", params=KERNEL_ENVS + [f"py{v}" for v in PYTHON_KERNELS if v != "3.11"])
def kernel(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"seal-{request.param}")
    (work / "demo.py").write_text(PART)
    python = python_kernel(request.param[2:]) if request.param.startswith("py") else kernel_python(request.param)
    with start_kernel(work, python=python) as k:
        assert k.connection.run_cell(PRELUDE, timeout=60).status == "ok"
        yield k, work


@pytest.mark.parametrize("case", sorted(ATTACKS))
def test_a_notebook_that_goes_after_the_seal_gets_a_fresh_install_never_a_call(kernel, case):
    k, work = kernel
    conn = k.connection
    module = KernelModule(f"_crane_test_seal_{case.replace('-', '_')}", "a test module", [work / "demo.py"])
    client = ModuleClient(conn, module)
    assert client.call("add", 2, 3, timeout=10, what="demo") == 5
    assert client.call("via_class", 2, 3, timeout=10, what="demo") == 5
    assert (client.installs, client.replaced) == (1, 0)
    attack = (f"MARK.clear()\nSTAGED = True\nm = sys.modules[{module.name!r}]\n"
              f"h = m.__crane_seal__.__callback__.__self__\n{ATTACKS[case]}")
    for _ in range(5):
        run = conn.run_cell(attack, timeout=120)
        assert run.status == "ok", (case, run)
        if conn.evaluate("STAGED"):
            break
        assert client.call("add", 2, 3, timeout=10, what="demo") == 5  # (installed afresh: staged again on it)
    else:
        pytest.fail(f"{case}: the freed seal's address was never free for the notebook's object")
    replaced = client.replaced
    assert conn.evaluate(f"sys.modules[{module.name!r}].add(0, 0)") == "fake"  # (the rebinding is in)
    assert conn.evaluate("MARK") == ["evil"]
    conn.run_cell("MARK.clear()", timeout=60)
    before = kernel_state(conn)
    assert client.call("add", 1, 1, timeout=10, what="demo") == 2, case
    assert client.call("via_class", 4, 1, timeout=10, what="demo") == 5, case
    assert kernel_state(conn) == before, case
    assert conn.evaluate("MARK") == [], case  # nothing of the notebook's ran in CRANE's requests
    assert client.replaced == replaced + 1, case  # installed afresh, once
    assert conn.evaluate(f"sys.modules[{module.name!r}] is not m") is True, case
    conn.run_cell("del m", timeout=60)


TRACER = r"""
import dis
def evil(op, m, name, args, quiet, missing):  # (reads no global: made into a function with empty builtins)
    m.__dict__.setdefault('FORGED', []).append(op)
    return (0, 'fake') if op == 1 else True
_ins = {}
def tracer(frame, event, arg):  # opcode events in the request's own `<string>` frames
    if frame.f_code.co_filename != '<string>':
        return None
    frame.f_trace_opcodes = True
    def local(frame, event, arg):
        if event == 'opcode':
            code = frame.f_code
            if code not in _ins:
                i = list(dis.get_instructions(code))
                _ins[code] = {a.offset: (a, b) for a, b in zip(i, i[1:])}
            a, b = _ins[code].get(frame.f_lasti, (None, None))
            if a is not None and a.opname.startswith('LOAD_FAST') and 'c' in (a.argval if type(a.argval) is tuple
                                                                             else (a.argval,)) \
                    and b.argval == '__builtins__':
                frame.f_locals['c'] = evil.__code__  # (after the checks, before the call)
        return local
    return local
sys.settrace(tracer)
"""


def test_a_trace_function_of_the_notebooks_cannot_swap_the_checked_code(kernel, request):
    if request.node.callspec.params["kernel"].startswith("py"):
        pytest.skip("the repro's opcode tracing is written for the two environments' Python (3.11)")
    k, work = kernel
    conn = k.connection
    module = KernelModule("_crane_test_seal_tracer", "a test module", [work / "demo.py"])
    client = ModuleClient(conn, module)
    assert client.call("add", 2, 3, timeout=10, what="demo") == 5
    assert conn.run_cell(TRACER, timeout=60).status == "ok"
    try:
        value = client.call("add", 1, 1, timeout=10, what="demo")
    finally:
        conn.run_cell("sys.settrace(None)", timeout=60)
    assert value == 2
    assert conn.evaluate(f"sys.modules[{module.name!r}].__dict__.get('FORGED')") is None


# The hooks of an earlier cell: each rewrites a frame of the request's (through `frame.f_locals`: written back by CPython
# after a trace or profile function returns, by `PyFrame_LocalsToFast` for a monitoring tool or a collector callback on
# 3.11/3.12, through the frame's proxy on 3.13) so that CRANE's reply would be the notebook's: the seal call's `args`
# at its `call` event (add(40, 2)), or the checked code object between the seal's checks and the call (`'fake'`).
HOOKS = r"""
import ctypes, dis, gc, sys, threading, types
HITS = []
def _set(frame, name, value):
    frame.f_locals[name] = value
    if sys.version_info < (3, 13):
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
def _args(frame):  # the seal's call (op 1) of `add`: other numbers
    if frame.f_code.co_name == '_seal' and frame.f_locals.get('op') == 1 and frame.f_locals.get('name') == 'add':
        _set(frame, 'args', (40, 2))
        HITS.append('args')
def evil_seal(op, m, name, args, quiet, missing):  # (reads no global: made into a function with empty builtins)
    return (0, 'fake') if op == 1 else True
_WINDOW = {}
def _code(frame):  # between the last check of the seal's code object `c` and its call: the notebook's code instead
    code = frame.f_code
    if code.co_name != '<lambda>' or 'c' not in code.co_varnames:
        return
    if code not in _WINDOW:
        loads = [i.offset for i in dis.get_instructions(code) if i.opname.startswith('LOAD_FAST')
                 and 'c' in (i.argval if type(i.argval) is tuple else (i.argval,))]
        _WINDOW[code] = (loads[-2], loads[-1]) if len(loads) > 1 else (0, 0)
    lo, hi = _WINDOW[code]
    c = frame.f_locals.get('c')
    if lo < frame.f_lasti < hi and type(c) is types.CodeType and c.co_name == '_seal':
        _set(frame, 'c', evil_seal.__code__)
        HITS.append('code')
def tracer(frame, event, arg):
    if event == 'call':
        _args(frame)
    return None
def profiler(frame, event, arg):
    if event == 'call':
        _args(frame)
def on_start(code, offset):
    try:
        if code.co_name == '_seal':
            _args(sys._getframe(1))
    except Exception:
        pass
def on_collect(phase, info):
    if phase != 'start':
        return
    try:
        f = sys._getframe(1)
        for _ in range(12):
            if f is None:
                break
            _code(f)
            f = f.f_back
    except Exception:
        pass
_THRESHOLD = gc.get_threshold()
"""
ARM = {
    "settrace": "sys.settrace(tracer)",
    "setprofile": "sys.setprofile(profiler)",
    "monitoring": "M = sys.monitoring\nM.use_tool_id(2, 'notebook')\nM.register_callback(2, M.events.PY_START, on_start)\n"
                  "M.set_events(2, M.events.PY_START)",
    "threading-all": "threading.settrace_all_threads(tracer)",
    "gc-callbacks": "gc.callbacks.append(on_collect)\ngc.set_threshold(1)",
}
# the hook, as the notebook left it, after CRANE's call
HELD = {
    "settrace": "sys.gettrace() is tracer",
    "setprofile": "sys.getprofile() is profiler",
    "monitoring": "sys.monitoring.get_tool(2) == 'notebook' and sys.monitoring.get_events(2) == "
                  "sys.monitoring.events.PY_START and sys.monitoring.register_callback(2, sys.monitoring.events.PY_START, "
                  "on_start) is on_start",
    "threading-all": "sys.gettrace() is tracer and threading.gettrace() is tracer",
    "gc-callbacks": "gc.callbacks == [on_collect] and gc.get_threshold()[0] == 1 and gc.isenabled()",
}
DISARM = {
    "settrace": "sys.settrace(None)",
    "setprofile": "sys.setprofile(None)",
    "monitoring": "sys.monitoring.set_events(2, 0)\nsys.monitoring.register_callback(2, sys.monitoring.events.PY_START, "
                  "None)\nsys.monitoring.free_tool_id(2)",
    "threading-all": "threading.settrace_all_threads(None)\nthreading.settrace(None)",
    "gc-callbacks": "gc.set_threshold(*_THRESHOLD)\ngc.callbacks.remove(on_collect)",
}
NEW_IN_312 = ("monitoring", "threading-all")


@pytest.mark.parametrize("hook", sorted(ARM))
def test_a_hook_of_the_notebooks_sees_no_frame_of_the_request(kernel, hook, request):
    if hook in NEW_IN_312 and request.node.callspec.params["kernel"] not in ("py3.12", "py3.13"):
        pytest.skip(f"{hook}: Python 3.12+ (the 3.12 and 3.13 kernels)")
    k, work = kernel
    conn = k.connection
    module = KernelModule(f"_crane_test_hook_{hook.replace('-', '_')}", "a test module", [work / "demo.py"])
    client = ModuleClient(conn, module)
    assert client.call("add", 2, 3, timeout=10, what="demo") == 5
    assert conn.run_cell(HOOKS, timeout=60).status == "ok"
    arm = conn.run_cell(ARM[hook], timeout=60)
    assert arm.status == "ok", arm
    try:
        value = client.call("add", 1, 1, timeout=30, what="demo")
        held = conn.evaluate(HELD[hook], timeout=30)
    finally:
        conn.run_cell(DISARM[hook], timeout=60)
    assert (value, conn.evaluate("HITS")) == (2, []), hook  # CRANE's own answer; the hook saw no frame of it
    assert held is True, hook  # the notebook's hook is back, as it was
    assert client.call("add", 1, 1, timeout=10, what="demo") == 2

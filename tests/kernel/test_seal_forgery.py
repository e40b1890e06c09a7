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
3.13 kernels. Still open, and recorded as a strict xfail: a trace function of the notebook's with opcode events
rewrites the request's own lambda locals between the checks and the call.
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
    made = []
    d = m.__dict__
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


@pytest.mark.xfail(strict=True, reason="open (found while fixing M1): a trace function of the notebook's with opcode "
                   "events sees the request's own lambda frames and rewrites their locals between the seal's checks "
                   "and the call (here the seal's code object for one of its own); closing it needs the user's hooks "
                   "and the collector off before the request enters any frame (docs/sandbox.md, 'Not proven')")
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

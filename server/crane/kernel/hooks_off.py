"""The first step of every private-module request: no frame of CRANE's runs where a notebook's hook can see it.

A private request's expression is evaluated by IPython in the notebook's namespace, in the kernel's main thread, where
an earlier cell may have left hooks that see (and through `frame.f_locals` rewrite) every Python frame that runs: a
trace function (`sys.settrace` with opcode events; `threading.settrace_all_threads` on 3.12+), a profile function
(`sys.setprofile`: CPython writes a profile function's `f_locals` changes back into the frame as it does a
tracer's), `sys.monitoring` callbacks (3.12+; on 3.13 a frame's `f_locals` writes through), a `gc.callbacks` entry
(run at a collection one of CRANE's allocations triggers, it walks `sys._getframe()` up to CRANE's frames). CRANE's
code turned them off only once inside its own frames: a tracer could swap the seal's checked code object for one of
its own between the checks and the call, or rewrite a function's arguments at its `call` event, and CRANE's reply (a
probe fact, an export's proof) came from the notebook's code (tests/kernel/test_seal_forgery.py).

`guarded(expr)` wraps one expression so that it runs INSIDE a trace function of CRANE's: while a trace or profile
function runs, CPython counts the thread as tracing (`PyThreadState_EnterTracing`; 3.12+: every `sys.monitoring`
callback, the legacy hooks included, is called so), and no trace, profile or monitoring event fires in that thread
for any frame until it returns, whatever hooks are set. The request's top-level frame (IPython's `eval`, whose locals
are the notebook's namespace: nothing is read from or bound in it) reaches the interpreter's `sys.gettrace` and
`sys.settrace` from literals by C descriptors, proves them `sys`'s own C functions (as kernel/private_module's
`SYS_EXPR` does), and by C calls alone — no Python frame entered before — saves the thread's trace function and
makes a fresh lambda of the request's its trace function (`enter`); then calls a trigger lambda, whose `call` event
runs `enter` (before the notebook's profile function or monitoring tools see the trigger: the legacy trace hook is
called first). `enter` puts the notebook's trace function back at once (it fires again only once `enter` returns,
and a guard keeps `enter` from running twice), then, still inside the trace call, runs the guard: a function
compiled per request with the builtins' own `exec`/`compile` (proven), on empty builtins, with the collector
already off (turned off first inside the trace call: none of CRANE's allocations runs a collection, so neither a
`gc.callbacks` entry nor a finalizer of a cycle of the notebook's runs in CRANE's frames), which clears every
`sys.monitoring` callback of tools 0-5 for each event where the request starts a thread of CRANE's (`threads`: the
export's pickler, which is not inside the trace call; a tool's enabled events stay as they are), runs `expr`, and puts
all of it back exactly in its `finally`.

What other threads of the kernel see (review r1 M1): only what must be off process-wide is. `threading`'s hooks for
new threads (`threading.settrace`/`setprofile`, a debugger's) are left as they are: the request starts no
`threading` thread (the export's pickler is started with `_thread`, which reads no hook, and starts with none), and
a thread the notebook starts meanwhile keeps them (b9b950c cleared them for the whole request: such a thread ran
untraced for good; tests/kernel/test_hooks_off_threads.py). `gc.callbacks` is left as it is (b9b950c emptied it:
an explicit `gc.collect()` of another thread in the window ran without the notebook's callbacks); with the collector
off no collection runs in CRANE's frames but an explicit one, which CRANE's kernel code never calls. The collector
itself is off for the request (as the seal's call and the installs already had it): another thread's allocations
trigger no collection in that window, one that would have is only later (the counts carry over: the first
allocation past the threshold after the request collects), an explicit `gc.collect()` still runs. An enabled
collector is not an option: a collection triggered by CRANE's allocations runs the notebook's `gc.callbacks` and
its cycles' finalizers in CRANE's frames (`sys._getframe()` reaches them; the `gc-callbacks` case of
tests/kernel/test_seal_forgery.py). `sys.monitoring` (3.12+) has no per-thread switch (`set_local_events` is per
code object, for every thread; a callback is per tool and event, process-wide): its callbacks are cleared for the
request, so an event of a notebook's tool (a debugger's: debugpy on 3.12+ uses it) in ANOTHER thread during the
window is lost (not called; its tool, enabled events and `DISABLE` state are kept, the callback is back after). That is
done only for a module whose requests start a thread of CRANE's (`KernelModule.threads`: the transplant export's
pickler, started with `_thread`. Per-thread suspension is possible in principle — the pickler thread entering a
trace call of its own, as the main thread does, started on C calls alone so that no frame of it runs before — but
is not done: kernel/pickling's `run` is a Python frame a notebook's tool would see first); a probe's, an
install's, cloudpickle's and every other quiet module's request clear nothing of `sys.monitoring` (the main thread,
inside the trace call, fires no event: the `monitoring` case of tests/kernel/test_seal_forgery.py on 3.12/3.13).
Only 3.12+ kernels have `sys.monitoring`. Its outcome reaches the trigger through the trigger's own
local (`frame.f_locals`, written back by CPython after a trace function returns, 3.11/3.12, or through the 3.13
proxy): its value is returned, its exception raised there, so the reply is `expr`'s as before.

Only quiet modules are called so (kernel/private_module.KernelModule.quiet): the fork sandbox's start forks the kernel,
and a child forked inside a trace call would run the cell with the thread still counted as tracing.

Not proven (docs/sandbox.md): in the top-level frame, until `enter` runs, the notebook's hooks are on (that frame is
theirs to see): one that swaps `sys.settrace`/`gettrace` (or the import machinery's `sys`) between the proof and the
call gets its function called, or that swaps `builtins.exec`/`compile` or `sys.monitoring`'s, `gc`'s entries before
`enter` proves them (the request is then refused). The trigger's frame, after `enter` returns, and IPython's
formatting and ipykernel's sending of the reply run with every hook back: a profile function, a monitoring tool or
a trace function there can rewrite the reply as a display formatter of the notebook's can (the reply channel:
docs/sandbox.md's threat model). `sys.addaudithook` hooks cannot be removed (they see
`sys.monitoring.register_callback`'s audit events).
"""

from __future__ import annotations

# C-level readers from literals (nothing of the notebook's is looked up)
_T = "().__class__.__class__"
_DT = "{}.__class__"
_BF = f"{_T}(().__class__.__base__.__subclasses__)"
_D = "(lambda: 0).__builtins__"
_SELF = f"{_BF}.__dict__['__self__'].__get__"
_FNAME = f"{_BF}.__dict__['__name__'].__get__"
# `sys`, through the builtins' `__spec__` (its class's `__init__`'s globals: the frozen import machinery's namespace)
_S = (f"{_DT}.get((lambda: 0).__class__.__dict__['__globals__'].__get__({_T}.__dict__['__dict__'].__get__("
      f"{_T}({_DT}.get({_D}, '__spec__'))).get('__init__')), 'sys')")
_MT = f"{_T}({_S})"
_SD = f"{_T}.__dict__['__dict__'].__get__({_MT})['__dict__'].__get__({_S})"


def _get(name: str) -> str:
    """`sys`'s own entry `name` (dict's own `get`: no method of the namespace's is called)."""
    return f"{_DT}.get({_SD}, {name!r})"


def _own(name: str) -> str:
    """`sys`'s entry `name` is the C function `name` bound to `sys` (nothing of it called: the builtin-function type's
    own `__self__` and `__name__` descriptors raise for any other object, which fails the request)."""
    f = _get(name)
    return f"{_SELF}({f}) is {_S} and {_FNAME}({f}) == {name!r}"


# `sys` a plain module (no heap subclass whose `__dict__` property would run), its `gettrace` and `settrace` its own
# C functions (re-read by the step itself)
_PROOF = (f"not {_T}.__dict__['__flags__'].__get__({_MT}) & 512 and {_T}.__dict__['__name__'].__get__({_MT}) == "
          f"'module' and {_own('gettrace')} and {_own('settrace')}")

# The guard, compiled per request on empty builtins with the proven readers `K` (from kernel/private_module's
# `SYS_EXPR`: T, BF, D, S, SD, M, MT), the collector already off (`was`: it was on; `gon`: `gc.enable`). Called
# inside `enter` (no event fires): monitoring callbacks off (`quiet_others`), `F()`, all back; its outcome (1, value) or (2, exception) written to the trigger's local `__crane_reply__` before the collector is back
# (3.11/3.12: a later read of the trigger's `f_locals`, a collector callback's, would refill it from the frame).
# The notebook's Python signal handlers (a `signal.signal(SIGALRM, h)` with an interval timer: the interpreter calls
# `h(signum, frame)` in the main thread between two bytecodes, with CRANE's frame, whatever the trace state; round
# 16) are deferred: each signal whose handler is not the interpreter's (SIG_DFL, SIG_IGN, `default_int_handler`)
# gets a C-level recorder (a dict's `__setitem__`: no Python frame) for the request, by `_signal`'s own C functions
# (main thread only: elsewhere nothing is swapped); each is put back before the reply is handed over, and a signal
# that came meanwhile is raised again once (signals coalesce as the kernel's do) by the trigger, after the trace call
# (`fire`): its handler runs where the notebook's hooks already may (the trigger's frame, IPython's formatting: the
# reply is theirs to rewrite there, docs/sandbox.md's threat model), never in the guard's frame, which holds the
# request's outcome before it is handed over (round 16 follow-up: raised there, a handler rewrote the export's reply).
_GUARD = """
def _guard(frame, F, K, was, gon, quiet_others):
    T, BF, D, S, SD, M, MT = K
    MDD = T.__dict__["__dict__"].__get__(MT)["__dict__"].__get__
    SELF = BF.__dict__["__self__"].__get__
    FNAME = BF.__dict__["__name__"].__get__
    DG = {}.__class__.get
    sm = DG(M, "_signal")
    g = []
    for n in ("getsignal", "signal", "raise_signal", "default_int_handler"):
        x = DG(MDD(sm), n) if T(sm) is MT else None
        g.append(x if T(x) is BF and SELF(x) is sm and FNAME(x) == n else None)
    getsig, setsig, raisesig, dih = g
    nsig = DG(MDD(sm), "NSIG") if T(sm) is MT else None
    pend = {}
    swapped = []
    if getsig is not None and setsig is not None and raisesig is not None and T(nsig) is T(1):
        s = 1
        while s < nsig and s < 1024:
            try:
                h = getsig(s)
                if not (h is None or T(h) is T(1) or h is dih):
                    setsig(s, pend.__setitem__)
                    swapped.append((s, h))
            except:
                pass
            s += 1
    mon = DG(SD, "monitoring")
    f = []
    for m, n in ((S, "exc_info"), (mon, "register_callback")):
        x = DG(MDD(m), n) if T(m) is MT else None
        f.append(x if T(x) is BF and SELF(x) is m and FNAME(x) == n else None)
    exc_info, rc = f
    mons = []
    if rc is not None and quiet_others:
        for tool in (0, 1, 2, 3, 4, 5):
            bit = 1
            while bit < 16777216:
                try:
                    mons.append((tool, bit, rc(tool, bit, None)))
                except:
                    break
                bit += bit
    r = (2, None)
    try:
        r = (1, F())
    except:
        r = (2, exc_info()[1] if exc_info is not None else None)
    finally:
        for tool, bit, cb in mons:
            rc(tool, bit, cb)
        for s, h in swapped:
            try:
                setsig(s, h)
            except:
                pass
        came = []
        for s in pend:
            came.append(s)
        if came:
            def fire():
                for s in came:
                    try:
                        raisesig(s)
                    except:
                        pass
            r = (4, r, fire)
        frame.f_locals["__crane_reply__"] = r
        if was:
            gon()
"""



def _why(what: str) -> str:
    """Why a request is refused: the notebook replaced `what` (each refusal names the thing it found)."""
    return (f"CRANE: the notebook replaced {what} (not the interpreter's own): CRANE's private request is not run in "
            "this kernel (it would call that code)")


_WHY_SYS = _why("what leads to the interpreter's `sys` (its builtins' `__spec__`, the import machinery's namespace, "
                "`sys.getprofile`, `sys.modules`)")
_WHY_TRACE = _why("`sys` or its `sys.gettrace`/`sys.settrace`")
_WHY_EXEC = _why("`builtins.exec`")
_WHY_COMPILE = _why("`builtins.compile`")


def refused(why: str) -> str:
    """An expression that fails the request with a `KeyError` naming `why` (nothing else is run)."""
    return f"{{}}[{why!r}]"


def guarded(expr: str, sys_expr: str, threads: bool = False) -> str:
    """`expr` evaluated inside a trace function of the request's own (no trace, profile or monitoring event fires
    in its frames), with the collector off, put back after; its value or exception is the request's. `threads`: the
    request starts a thread of CRANE's (the export's pickler, not inside the trace call): every `sys.monitoring`
    callback is cleared for it as well (process-wide: put back exactly after). `sys_expr`: an
    expression of (T, BF, D, S, SD, M, MT) or False (kernel/private_module.SYS_EXPR); a kernel whose `sys`,
    `exec` or `compile` are not the interpreter's own refuses the request (a `KeyError` naming why)."""
    own_e = "(T(e) is BF and FNAME(e) == 'exec' and T(b := SELF(e)) is MT and MDD(b) is D)"
    own_ex = f"{own_e} and T(c) is BF and FNAME(c) == 'compile' and SELF(c) is b"
    # the collector off first (before the guard is compiled: a finalizer of the notebook's runs in no frame of
    # CRANE's), `gc`'s own switches (none where `gc` is not loaded or not its own: left as it is)
    own = "lambda m, n: x if T(x := DG(MDD(m), n) if T(m) is MT else None) is BF and SELF(x) is m and FNAME(x) == n else None"
    refuse = f"f.f_locals.__setitem__('__crane_reply__', (0, {_WHY_COMPILE!r} if {own_e} else {_WHY_EXEC!r}))"
    refuse_sys = f"f.f_locals.__setitem__('__crane_reply__', (0, {_WHY_SYS!r}))"
    # run inside the trace call: nothing here raises (a trace function's exception would unset the notebook's)
    run = (f"(lambda P: (lambda T, BF, D, S, SD, M, MT: (lambda SELF, FNAME, MDD, DG: (lambda own: "
           f"(lambda gis, goff, gon: (lambda was: (lambda e, c: "
           f"e(c({_GUARD!r}, '<crane-kernel/guard>', 'exec'), g := {{'__builtins__': {{}}}}) or "
           f"g['_guard'](f, lambda: {expr}, P, was, gon, {bool(threads)!r}) if {own_ex} else {refuse} or (was and gon()))"
           f"(DG(D, 'exec'), DG(D, 'compile')))"
           f"(gis is not None and goff is not None and gon is not None and gis() and (goff() or True)))"
           f"(own(DG(M, 'gc'), 'isenabled'), own(DG(M, 'gc'), 'disable'), own(DG(M, 'gc'), 'enable')))({own}))"
           f"(BF.__dict__['__self__'].__get__, BF.__dict__['__name__'].__get__, "
           f"T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__, {{}}.__class__.get))(*P) "
           f"if P else {refuse_sys})({sys_expr})")
    # (only at the trigger's `call` event: a Python function a collection or a finalizer calls in between is not it)
    enter = (f"(lambda f, ev, a, old={_get('gettrace')}(), st={_get('settrace')}, done=[]: None if done or "
             f"f.f_code.co_varnames != ('__crane_reply__',) else done.append(1) or st(old) or {run})")
    # (4: signals of the notebook's came during the request: raised again here, after the trace call, by the guard's
    # `fire`, so their handlers run where the notebook's hooks already may, never in the request's own frames)
    # (one frame: a notebook's trace hook, back after the trace call, sees no other lambda of the request's)
    one = "__crane_reply__{i}[1] if __crane_reply__{i}[0] == 1 else {{}}[__crane_reply__{i}[1]] if " \
          "__crane_reply__{i}[0] == 0 else (_ for _ in ()).throw(__crane_reply__{i}[1])"
    trigger = (f"(lambda __crane_reply__=None: (__crane_reply__[2]() or ({one.format(i='[1]')})) "
               f"if __crane_reply__[0] == 4 else ({one.format(i='')}))")
    return f"({_get('settrace')}({enter}), {trigger}())[1] if {_PROOF} else {refused(_WHY_TRACE)}"

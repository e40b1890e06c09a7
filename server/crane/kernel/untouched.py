"""Proof that CRANE's private work left a kernel as its user owns it (for the bench and the tests).

`kernel_state` fingerprints what the user owns — namespace keys and object ids, execution count, In, Out, the
history session and the user's IPython event callbacks (the probe's own execution counter is left out), the
at-fork handlers, OOM score adjustment, CPU affinity and scheduling of the kernel process, and the global random
states (random, numpy, torch, TensorFlow) — with one private request, which itself changes none of it. `IopubRecorder` is a second client on the kernel's iopub
channel, as the user's notebook frontend is: it records every message in a thread, so nothing CRANE does can
show an output (stream, display, result, error, execute_input) without it being seen. `Untouched` combines both
around a block: `unchanged` is true when the fingerprint is the same after, no output was published and no
effect sentinel fired.

Effect sentinels (ids prove nothing about code that ran): for the block, `Untouched` installs privately in the
kernel hooks that record every call CRANE's kernel-side code makes into them — a profile hook (`sys.setprofile`,
and `threading`'s for new threads) recording events below a frame of CRANE's own (`<crane-kernel/...>` code called
from CRANE's code: the entry point itself being entered and left is what every request shows a hook), wrappers
around `builtins.open` (not `io.open`: `open` in the namespace, ipykernel's, is pickled by that name) and
`json.loads/dumps/load/dump` recording calls from CRANE's code, and an input
transformer recording any non-empty cell transformed; with `sentinel="name"` also an object bound under that name
whose every hook pickling or attribute access may call (`__reduce_ex__`, `__reduce__`, `__getstate__`,
`__getattr__`, a `__class__` property, ...) records. All are removed after the block, the object before the
fingerprint is compared. `hits` lists what fired. Audit hooks are not used: they cannot be removed.

Waiting is on events, not sleeps: the recorder counts as subscribed once it has seen the status messages of a
private request (ZeroMQ subscriptions take effect asynchronously), and the check after the block waits for the
idle status of its own request, which iopub delivers after every message the block caused.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from typing import Any

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError
from crane.kernel.target import KernelTarget

OUTPUT_TYPES = frozenset({"stream", "display_data", "update_display_data", "execute_result", "error",
                          "execute_input", "clear_output"})

# What the user owns, read in the kernel by one private expression (a fresh dict, so no name is left behind).
# Besides the namespace and IPython's counters and event callbacks: the interpreter's at-fork handler lists
# (found as the gc referrers of handlers the standard library registers, in one walk), the process's OOM score adjustment,
# CPU affinity, scheduling policy and nice value, and the global random states of random, numpy, torch and
# TensorFlow (read without creating any: TensorFlow's global generator only where it exists).
_STATE_SRC = r"""
def f(ip):
    import gc, hashlib, itertools, os, sys  # (the probe's execution counter: a count's C `__next__`, left out)
    out = {'ns': sorted((k, id(v)) for k, v in ip.user_ns.items()), 'count': ip.execution_count,
           'In': list(ip.user_ns.get('In', [])), 'Out': sorted(ip.user_ns.get('Out', {}).keys()),
           'hist': ip.history_manager.session_number,
           'events': sorted((e, [id(c) for c in cs if type(c).__module__ != '_crane_probe' and not (
                                type(c).__name__ == 'method-wrapper' and type(c.__self__) is itertools.count)])
                            for e, cs in ip.events.callbacks.items())}
    anchors = []
    for mod, names in (('threading', ('_after_fork',)),
                       ('logging', ('_prepareFork', '_afterFork', '_acquireModuleLock', '_releaseModuleLock',
                                    '_acquireLock', '_releaseLock', '_after_at_fork_child_reinit_locks'))):
        m = sys.modules.get(mod)
        anchors += [m.__dict__[n] for n in names if m is not None and n in m.__dict__]
    anchors = tuple(anchors)  # not a list: it would be found below
    lists = {}
    # one walk of every object for all the anchors together (a walk per anchor cost eight: ~0.1 s each in a kernel
    # holding TensorFlow): the lists holding any of them, each once
    for r in gc.get_referrers(*anchors) if anchors else ():
        if type(r) is list and any(x is fn for x in r for fn in anchors):
            lists[id(r)] = [id(h) for h in r]
    out['atfork'] = sorted(lists.items())
    try:
        with open('/proc/self/oom_score_adj') as fh:
            out['oom_score_adj'] = fh.read().strip()
    except OSError:
        out['oom_score_adj'] = None
    try:
        out['affinity'] = sorted(os.sched_getaffinity(0))
        out['sched'] = [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)]
    except (AttributeError, OSError):
        pass
    rng = {}
    r = sys.modules.get('random')
    if r is not None:
        rng['random'] = hashlib.sha256(repr(r.getstate()).encode()).hexdigest()
    np = sys.modules.get('numpy')
    if np is not None:
        try:
            st = np.random.get_state()
            rng['numpy'] = hashlib.sha256(st[1].tobytes() + repr(st[2:]).encode()).hexdigest()
        except Exception:
            pass
    torch = sys.modules.get('torch')
    if torch is not None:
        try:
            rng['torch'] = hashlib.sha256(bytes(torch.random.get_rng_state().tolist())).hexdigest()
        except Exception:
            pass
    tfr = sys.modules.get('tensorflow.python.ops.stateful_random_ops')
    gen = getattr(tfr, '__dict__', {}).get('global_generator')  # (made on first use: None before)
    if gen is not None:
        try:
            rng['tensorflow'] = hashlib.sha256(gen.state.numpy().tobytes()).hexdigest()
        except Exception:
            pass
    out['rng'] = rng
    return out
"""

# The private requests below read no name of the notebook's (they are evaluated in its namespace: a notebook's
# `exec`, `__import__` or `get_ipython` there, or in the builtins, would run): `_UT_SYS_EXPR` reaches `sys` from
# literals by C descriptors, `exec` is the builtins module's (one the notebook put there is used:
# this test-side check has no other way to run its source), and a
# bootstrap run on empty builtins gives the source a copy of the interpreter's builtins whose `__import__` is the
# import machinery's own (`_frozen_importlib.__import__`) and the shell from `InteractiveShell._instance` (no
# `get_ipython`). `KEEP`: the private module the source is kept in (installed once), else a fresh namespace.
_BOOTSTRAP = """
_md = T.__dict__["__dict__"].__get__(MT)["__dict__"].__get__
_b = D.copy()
_b["__import__"] = _md(M["_frozen_importlib"])["__import__"]
_ip = T.__dict__["__dict__"].__get__(_md(M["IPython.core.interactiveshell"])["InteractiveShell"])["_instance"]
_m = M.get(KEEP) if KEEP else None
if _m is None:
    _g = {"__builtins__": _b, "__name__": KEEP or "_crane_untouched_state"}
    E(SRC, _g)
    if KEEP:
        _m = MT(KEEP)
        _md(_m).update(_g)
        {}.__class__.__setitem__(M, KEEP, _m)
else:
    _g = _md(_m)
R = _g[FN](_ip, *ARGS)
"""
_PRIVATE_EXPR = (
    "(lambda P: (lambda T, BF, D, S, SD, M, MT: (lambda e: (e(@BOOT@, g := {'__builtins__': {}, 'T': T, 'D': D, "
    "'M': M, 'MT': MT, 'E': e, 'SRC': @SRC@, 'KEEP': @KEEP@, 'FN': @FN@, 'ARGS': @ARGS@, 'R': None}), g['R'])[1])"
    "(D.get('exec')))(*P) if P else 'untouched: the interpreter\\'s sys was not found')(@SYS@)"
)


# `sys` from literals (the builtins' `__spec__`, the frozen import machinery's namespace), as kernel/private_module's
# `SYS_EXPR` but not refusing a `sys` whose hook functions the notebook replaced (this check runs in such kernels):
# (type, None, the builtins' dict, sys, None, the module table, the module type)
_UT_SYS_EXPR = (
    "(lambda T, D, FT: (lambda S: (T, None, D, S, None, T.__dict__['__dict__'].__get__(T(S))['__dict__'].__get__(S)"
    "['modules'], T(S)))(FT.__dict__['__globals__'].__get__(T.__dict__['__dict__'].__get__(T(D.get('__spec__')))"
    "['__init__'])['sys']))(().__class__.__class__, (lambda: 0).__builtins__, (lambda: 0).__class__)"
)


def _private_expr(src: str, fn: str, args: tuple, keep: str | None = None) -> str:
    """The expression running `fn(shell, *args)` of the source `src` (kept as the private module `keep`, or in a
    fresh namespace), reading no name of the notebook's."""
    parts = {"BOOT": repr(_BOOTSTRAP), "SRC": repr(src), "KEEP": repr(keep), "FN": repr(fn), "ARGS": repr(args),
             "SYS": _UT_SYS_EXPR}
    return re.sub(r"@([A-Z]+)@", lambda m: parts[m.group(1)], _PRIVATE_EXPR)


STATE_EXPR = _private_expr(_STATE_SRC, "f", ())

# The effect sentinels (see the module docstring), installed as a private module `_crane_untouched`.
_SENTINEL_SRC = r"""
import builtins, json, sys, threading
HITS = []
SAVED = {}

def _crane(code):
    return code.co_filename.startswith('<crane-kernel')

def _prof(frame, event, arg):
    try:
        if event == 'call':
            back = frame.f_back
            if back is not None and _crane(back.f_code) and _crane(frame.f_code):
                HITS.append('profile hook called for ' + frame.f_code.co_name)
        elif event == 'c_call':
            back = frame.f_back
            if _crane(frame.f_code) and back is not None and _crane(back.f_code):
                HITS.append('profile hook called for ' + getattr(arg, '__name__', '?'))
    except Exception:
        pass

def _wrap(name, fn):
    def rec(*a, **k):
        try:
            f = sys._getframe(1)
            if _crane(f.f_code):
                HITS.append(name + ' called by ' + f.f_code.co_filename)
        except Exception:
            pass
        return fn(*a, **k)
    return rec

def _transformer(lines):
    if ''.join(lines).strip():
        HITS.append('input transformer ran on ' + repr(''.join(lines)[:40]))
    return lines

class Sentinel:
    def __init__(self):
        object.__setattr__(self, 'v', 1)
    def _hit(self, what):
        HITS.append('sentinel ' + what)
    def __reduce_ex__(self, p):
        Sentinel._hit(self, '__reduce_ex__')
        return (int, (1,))
    def __reduce__(self):
        Sentinel._hit(self, '__reduce__')
        return (int, (1,))
    def __getstate__(self):
        Sentinel._hit(self, '__getstate__')
        return {}
    def __getattr__(self, name):
        Sentinel._hit(self, '__getattr__ ' + name)
        raise AttributeError(name)
    def __sizeof__(self):
        Sentinel._hit(self, '__sizeof__')
        return 64
    @property
    def __class__(self):
        Sentinel._hit(self, '__class__')
        return Sentinel

def install(ip, name):
    del HITS[:]
    SAVED['profile'] = sys.getprofile()
    SAVED['tprofile'] = threading.__dict__.get('_profile_hook')
    sys.setprofile(_prof)
    threading.setprofile(_prof)
    SAVED['open'] = builtins.open
    builtins.open = _wrap('builtins.open', builtins.open)
    for f in ('loads', 'dumps', 'load', 'dump'):
        SAVED['json.' + f] = getattr(json, f)
        setattr(json, f, _wrap('json.' + f, getattr(json, f)))
    ip.input_transformers_post.append(_transformer)
    if name:
        ip.user_ns[name] = Sentinel()
    return True

def remove(ip, name):
    sys.setprofile(SAVED.get('profile'))
    threading.__dict__['_profile_hook'] = SAVED.get('tprofile')
    builtins.open = SAVED['open']
    for f in ('loads', 'dumps', 'load', 'dump'):
        setattr(json, f, SAVED['json.' + f])
    while _transformer in ip.input_transformers_post:
        ip.input_transformers_post.remove(_transformer)
    if name:
        ip.user_ns.pop(name, None)
    return list(HITS)
"""


def _sentinel_expr(call: str, name: str | None) -> str:
    """Install (once) the sentinel module privately, then `install`/`remove` it (no name of the notebook's read)."""
    return _private_expr(_SENTINEL_SRC, call, (name,), keep="_crane_untouched")


def kernel_state(conn: KernelConnection) -> dict:
    """The fingerprint of what the user owns, read with one private request."""
    return conn.evaluate(STATE_EXPR)


class IopubRecorder:
    """Records the iopub traffic of one kernel from a client of its own (`KernelConnection.watch_client`, or a
    started client given as `client`)."""

    def __init__(self, where: str | KernelTarget | None = None, client: Any = None):
        self.client = client if client is not None else KernelConnection.watch_client(where)  # type: ignore[arg-type]
        self.messages: list[dict] = []
        self.errors: list[str] = []  # what reading a message raised (the recorder goes on: the next one is read)
        self._seen = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crane-iopub-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                msg = self.client.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            except Exception as exc:  # (before, the thread ended here, silently: nothing later was recorded)
                if self._stopping.is_set():
                    return
                if len(self.errors) < 100:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                self._stopping.wait(0.05)
                continue
            with self._seen:
                self.messages.append(msg)
                self._seen.notify_all()

    def idle_count(self) -> int:
        with self._seen:
            return self._idle_locked()

    def wait_idle_beyond(self, count: int, timeout: float) -> bool:
        """Wait until more than `count` idle statuses were recorded."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while self._idle_locked() <= count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._seen.wait(left)
        return True

    def _idle_locked(self) -> int:
        return sum(m["msg_type"] == "status" and m["content"].get("execution_state") == "idle" for m in self.messages)

    def outputs(self) -> list[dict]:
        with self._seen:
            return [m for m in self.messages if m["msg_type"] in OUTPUT_TYPES]

    def clear(self) -> None:
        with self._seen:
            self.messages.clear()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2)
        self.client.stop_channels()


def watch_target(conn: KernelConnection) -> KernelTarget | None:
    """Where a second client reaches `conn`'s kernel: the target it was attached by, or its owner's (a kernel
    CRANE started: its KernelManager's connection file, or the ServerKernel's target)."""
    if conn.target is not None:
        return conn.target
    owner_target = getattr(conn.owner, "target", None)
    if isinstance(owner_target, KernelTarget):
        return owner_target
    connection_file = getattr(conn.owner, "connection_file", None)
    return KernelTarget.local(connection_file) if connection_file else None


class Untouched:
    """`with Untouched(conn) as check: ...` then `check.unchanged` (and `check.outputs` when it is not)."""

    def __init__(self, conn: KernelConnection, timeout: float = 30.0, sentinel: str | None = None,
                 effects: bool = True):
        self.target = watch_target(conn)
        if self.target is None:
            raise KernelError("the kernel's connection is unknown: nothing can watch its iopub channel")
        self.conn, self.timeout = conn, timeout
        self.sentinel, self.effects = sentinel, effects or sentinel is not None
        self.hits: list[str] = []  # what an effect sentinel recorded during the block
        self.unchanged: bool | None = None
        self.outputs: list[dict] = []
        self._recorder: IopubRecorder | None = None
        self._before: Any = None
        self.after: Any = None

    def changes(self) -> dict:
        """What differs between the fingerprints before and after the block (for messages)."""
        if not isinstance(self._before, dict) or not isinstance(self.after, dict):
            return {}
        return {k: (self._before.get(k), self.after.get(k)) for k in set(self._before) | set(self.after)
                if self._before.get(k) != self.after.get(k)}

    def __enter__(self) -> Untouched:
        if self.effects:
            self.conn.evaluate(_sentinel_expr("install", self.sentinel))
        self._recorder = rec = IopubRecorder(self.target)
        deadline = time.monotonic() + self.timeout
        while True:  # until the recorder sees a request's statuses: then it is subscribed
            seen = rec.idle_count()
            self._before = kernel_state(self.conn)
            if rec.wait_idle_beyond(seen, 1.0):
                break
            if time.monotonic() > deadline:
                rec.close()
                self._remove()
                raise KernelError("the kernel's iopub channel published nothing: cannot watch it")
        return self

    def __exit__(self, *exc: object) -> None:
        rec = self._recorder
        assert rec is not None
        try:
            if exc[0] is None:
                seen = rec.idle_count()
                after = kernel_state(self.conn)
                rec.wait_idle_beyond(seen, self.timeout)  # every message the block caused came before it
                self.outputs = rec.outputs()
                self.after = after
                self._remove()
                self.unchanged = after == self._before and not self.outputs and not self.hits
        finally:
            rec.close()
            if self.effects and not self._removed:
                try:
                    self._remove()
                except KernelError:
                    pass

    _removed = False

    def _remove(self) -> None:
        if self.effects and not self._removed:
            self._removed = True
            hits = self.conn.evaluate(_sentinel_expr("remove", self.sentinel))
            self.hits = [str(h) for h in hits] if isinstance(hits, list) else [repr(hits)]

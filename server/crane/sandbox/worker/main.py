"""Transplant worker: a fresh process of the kernel's own interpreter that runs one cell on a copy of its state.

Started by the daemon (`crane.sandbox.transplant`) with an allowlisted part of the kernel's environment (no
LD_PRELOAD, PYTHONPATH, ...: the rest is set once it is confined), GPUs hidden
(`CUDA_VISIBLE_DEVICES=-1`, `JAX_PLATFORMS=cpu`); the sandbox's parts and this one are compiled into
`_crane_sandbox` by the bootstrap, CRANE's private cloudpickle into `_crane_cloudpickle`. `worker_main`:
1. imports the kernel's library modules (those under the interpreter's prefix: no notebook code) and builds an
   IPython `InteractiveShell` without history, then waits (a warm worker) for one run request on stdin, or
   ends after idling, when the daemon goes (EOF) or when the kernel it serves ends (a pidfd);
2. takes the kernel's cwd, environment and `sys.path`, imports the library modules still missing, then
   confines itself exactly as a forked child does (`kernel/isolation._prepare_child`: oom_score_adj 1000,
   descriptors, namespaces and private layers or the blocking confinement, Landlock, seccomp, rlimits,
   capabilities dropped, audit hook) BEFORE any notebook code: the rest of the kernel's modules, the state
   (`state.pkl` and its out-of-band buffers, mapped copy-on-write) and the cell all run confined;
3. maps torch's cuda/mps device requests to the CPU where the kernel's torch had CUDA (or when asked), records
   what the kernel shrank before the copy (for kernel/miniature's `artefact`), writes a setup line with what was copied, runs the cell (`kernel/run`) and
   writes the record on the run's result FIFO (a portable run: up its stdout pipe, moved aside at boot by
   worker/boot.py; crane.sandbox.pipes): the same lines as a forked child.
A worker serves one run (its state is the run's) and ends.
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import select
import signal
import sys
import time
import types
from collections.abc import Generator, Iterable
from typing import Any

from crane.sandbox.kernel.common import (  # kernel: strip
    _TAMPERED,
    _Ctx,
    _fence,
    _json_line,
    _real_exit,
    _sent,
    _track_channel,
    _untraced,
    _write_json,
)
from crane.sandbox.kernel.isolation import _POOLS, _prepare_child  # kernel: strip
from crane.sandbox.kernel.library import carriable_module, is_library  # kernel: strip
from crane.sandbox.kernel.miniature import _REGISTRY  # kernel: strip
from crane.sandbox.kernel.request import check_request  # kernel: strip
from crane.sandbox.kernel.run import (  # kernel: strip
    _cell_begins,
    _cell_record,
    _epilogue_begins,
    _exec_plan,
    _fenced,
    _record,
    _record_write,
    _seal_constants,
    bind_asyncio,
)
from crane.sandbox.kernel.session import (  # kernel: strip
    _bind_hooks,
    _CommandLines,
    _keep_start_hooks,
    evaluate,
    run_command,
)
from crane.sandbox.shared.carry import STR_HASH_PROBE, apply_carried, str_set  # kernel: strip
from crane.sandbox.shared.keras_graph import KERAS_KEY, apply_keras  # kernel: strip
from crane.sandbox.shared.own_modules import OWN_MODULES_KEY, apply_own_modules  # kernel: strip
from crane.sandbox.worker.arrow import guard_arrow  # kernel: strip
from crane.sandbox.worker.devices import map_devices  # kernel: strip
from crane.sandbox.worker.finalizers import arm_finalizers, finalizers_missed, load_with_finalizers  # kernel: strip
from crane.sandbox.worker.frames import refuse_frame_reads  # kernel: strip
from crane.sandbox.worker.head import answer_self, end_ahead, fork_refused, serve_forked  # kernel: strip
from crane.sandbox.worker.imports import answer_physical_cores_first  # kernel: strip
from crane.sandbox.worker.load_vet import audited_load, snapshot_library  # kernel: strip
from crane.sandbox.worker.portable import (  # kernel: strip
    apply_limits,
    begin_portable,
    finish_portable,
    guard_off,
    guarded,
    lift_limits,
    prepare_portable,
)
from crane.sandbox.worker.reaper import end_descendants, hold_descendants  # kernel: strip
from crane.sandbox.worker.warmup import warm_up  # kernel: strip

_W: dict = {"preload_ms": 0.0, "failed": [], "settings_missed": []}
LOADED_MAX = 5000  # the modules a state's load imported, named in the setup line (worker/head.loaded_by)


_KEEP_ENV = ("CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS", "IPYTHONDIR", "TF_CPP_MIN_LOG_LEVEL", "JOBLIB_MULTIPROCESSING")


def _session_lines(fd: int) -> Generator[bytes, Any, None]:
    """The OS-confined session's JSON-line commands from its FIFO, until EOF."""
    reader = _CommandLines(fd)
    while line := reader.get():
        yield line


def _spec_is_library(spec: Any) -> bool:
    """Whether a module spec's file (or a package's first folder) lies under the standard library or an installed
    package (kernel/library.is_library)."""
    if spec is None:
        return False
    try:
        return is_library(spec.origin or (list(spec.submodule_search_locations or [""])[0]))
    except Exception:  # noqa: BLE001 - a spec we cannot place: not a library's
        return False


def _library_imported(name: str) -> bool:
    """Import `name` only where it and every package above it is a library's (issue 45): each parent is decided
    (and imported) before its child is looked up, since `find_spec("pkg.sub")` imports `pkg` first, and a top-level
    name is placed by `find_spec` alone, which runs none of its code. True where `name` is then imported and a
    library's; a module already held counts only where its own spec is a library's."""
    import importlib
    import importlib.util
    held = sys.modules.get(name)
    if held is not None:
        return _spec_is_library(getattr(held, "__spec__", None))
    parent = name.rpartition(".")[0]
    if parent and not _library_imported(parent):
        return False
    try:
        spec = importlib.util.find_spec(name)
    except Exception:  # noqa: BLE001 - not placed: not imported
        return False
    if not _spec_is_library(spec):
        return False
    try:
        importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - a module the worker cannot import: the state load will say so
        _W["failed"].append(name)
        return False
    return name in sys.modules


def _import(names: Iterable[str], only_library: bool) -> None:
    """Import `names` the worker lacks; `only_library`: those of a library only (no code of the notebook's own
    packages runs: the portable head, docs/sandbox.md)."""
    import importlib
    for name in names:
        if name in sys.modules:
            continue
        if only_library:
            _library_imported(name)
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a module the worker cannot import: the state load will say so
            _W["failed"].append(name)


def _shell() -> Any:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    c = Config()
    c.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=c)
    _kernel_exiter(shell)
    if isinstance(vars(InteractiveShell).get("db"), property):  # (IPython 9: made at its first use)
        shell._db = _MemoryDB()  # type: ignore[attr-defined]
    else:
        shell.db = _MemoryDB()
    return shell


class _MemoryDB(dict):
    """The worker's shell's `db` (IPython's store in the profile folder: `%cd`'s directory history, `%bookmark`,
    `%store`), kept in memory: a `%cd` of the cell's wrote `db/dhist` in the worker's profile, outside the run, and
    was `blocked` on IPython 9, where the store is made at its first use (round 16, F11). `keys` takes pickleshare's
    glob pattern."""

    def keys(self, globpat: str | None = None) -> Any:
        if globpat is None:
            return dict.keys(self)
        import fnmatch
        return [k for k in dict.keys(self) if fnmatch.fnmatch(str(k), globpat)]


def _kernel_exiter(shell: Any) -> None:
    """`exit` / `quit` as a kernel's shell has them (ipykernel's ZMQInteractiveShell: `exit(keep_kernel=False)`, and
    an `ask_exit` that sets `exit_now` unless the kernel is kept), so a cell calling them runs as in the kernel
    (kernel/audit._guard_shell_exit), not into a terminal shell's missing `ask_exit` (AttributeError)."""
    from IPython.core.autocall import ZMQExitAutocall

    def ask_exit() -> None:
        shell.exit_now = not shell.keepkernel_on_exit

    shell.keepkernel_on_exit = None
    shell.ask_exit = ask_exit
    shell.exiter = ZMQExitAutocall(shell)
    for ns in (shell.user_ns, shell.user_ns_hidden):
        ns["exit"] = ns["quit"] = shell.exiter


class _Lines:
    """Lines from the daemon's request pipe (`fd`), without a buffered reader in the way of `select`; `out` is the
    pipe back to the daemon (the portable run's result channel: crane.sandbox.pipes)."""

    def __init__(self, fd: int, out: int = -1) -> None:
        self.fd, self.out, self.buf = fd, out, b""

    def _wait(self, timeout: float, gone: int | None) -> bool:
        """Whether the pipe has data (or EOF) within `timeout`, and `gone` (a pidfd) is not ready. `select` takes
        pipes on POSIX only: elsewhere a helper thread waits on the read."""
        if os.name == "posix":
            ready = select.select([self.fd] + ([gone] if gone is not None else []), [], [], max(0.0, timeout))[0]
            return bool(ready) and gone not in ready
        import threading
        got: list[bytes] = []
        t = threading.Thread(target=lambda: got.append(os.read(self.fd, 1 << 16)), daemon=True)
        t.start()
        t.join(max(0.0, timeout))
        if t.is_alive():
            return False
        self.buf += got[0] if got else b""
        self._eof = not got or not got[0]
        return True

    def next(self, timeout: float, gone: int | None = None) -> bytes | None:
        """The next line; None after `timeout`, at EOF, or when the descriptor `gone` (a pidfd) is ready."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self._wait(left, gone):
                return None
            if os.name != "posix":
                if getattr(self, "_eof", False):
                    return None
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def commands(self) -> Generator[bytes, int, None]:
        """A session's command lines until EOF (the portable session: its commands come down this pipe)."""
        while True:
            while b"\n" in self.buf:
                line, _, self.buf = self.buf.partition(b"\n")
                if line.strip():
                    yield line
            try:
                chunk = os.read(self.fd, 1 << 16)
            except InterruptedError:
                continue
            if not chunk:
                return
            self.buf += chunk

    def close(self) -> None:
        """The OS-confined paths use their FIFOs, not these pipes."""
        for fd in (self.fd, self.out):
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self.out = -1


def _kernel_pidfd(kernel: list | None) -> int | None:
    """A pidfd of the kernel this worker serves ([pid, start time]; the daemon's pid namespace), or None."""
    if not kernel:
        return None
    import errno
    pid, start = int(kernel[0]), int(kernel[1])
    try:
        fd = os.pidfd_open(pid)
    except AttributeError:
        return None
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            return None
        fd = -1
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        same = fd >= 0 and int(data[data.rindex(b")") + 2:].split()[19]) == start
    except (OSError, ValueError, IndexError):
        same = False
    if not same:  # already gone (or its pid reused): a descriptor that is ready at once
        if fd >= 0:
            os.close(fd)
        r, w = os.pipe()
        os.close(w)
        return r
    return fd


def worker_main(header: dict, lines: _Lines) -> None:
    t0 = time.perf_counter()
    _import(header.get("preload") or [], only_library=True)
    answer_physical_cores_first()  # (loky's `lscpu`, asked before any OS layer or guard: worker/imports.py)
    shell = _shell()
    if header.get("warm"):  # the heap frozen, before any request (worker/warmup.py)
        warm_up()
    _W["preload_ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
    try:  # the daemon's sign that this worker is warm (benchmarks wait on it)
        open(os.path.join(os.path.dirname(os.environ.get("IPYTHONDIR", "/nonexistent/x")), "ready"), "w").close()
    except OSError:
        pass
    kernel = _kernel_pidfd(header.get("kernel"))
    line = lines.next(float(header.get("idle_s", 600.0)), kernel)
    if kernel is not None:
        os.close(kernel)
    if not line:
        return  # idle too long, the daemon is gone, or the kernel it serves has ended
    spec = json.loads(line)
    warm = bool(header.get("warm"))

    def run_one(spec: dict, fd: int) -> None:  # (in the head's fork child)
        _run(spec, shell, warm, _Lines(-1, fd))

    while spec.get("fork") and fork_refused(spec) is None:  # a head: each run in a fork child (worker/head.py)
        if not serve_forked(spec, lines.out, (lines.fd, lines.out), run_one,
                            lambda mods: _import(mods, only_library=True)):
            return
        warm = True
        line = lines.next(float(header.get("idle_s", 600.0)))
        if not line:
            return
        spec = json.loads(line)
    if spec.get("fork"):
        answer_self(lines.out)  # (run here, as a one-shot worker)
    end_ahead()  # (whatever the request, no process forked ahead outlives the head serving it itself: a session,
    # a run without "fork" taken from a pooled head)
    if spec.get("session"):
        _session(spec, shell, lines)
    else:
        _run(spec, shell, warm, lines)


def _load_buffers(d: str, names: int | list[str]) -> list:
    """The out-of-band buffers (`names`, or `buf-0..n-1` for a count), mapped copy-on-write."""
    out = []
    for name in ([f"buf-{i}" for i in range(names)] if isinstance(names, int) else names):
        with open(os.path.join(d, name), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            out.append(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else bytearray())
    return out


def _rebind(obj: Any, ns: dict) -> Any:
    """A notebook function copied by value has globals of its own: give it the namespace's (so it sees the
    names the cell binds, as in the kernel), adding the globals it brought that the namespace lacks, themselves
    bound so (a function another reaches by name, `def outer(): return helper()`, reads the namespace too: before,
    `helper` kept its own globals, blind to the cell's names and to what the copy added). A notebook class's
    methods, static and class methods and properties' accessors alike, its notebook bases' too, and an instance's
    class's. A worklist, not recursion: cloudpickle gives the functions it copies one globals dict, which may hold
    thousands of them; an entry is set in the namespace before it is bound, so functions naming each other end."""
    pending: list = []
    out = _rebind_one(obj, ns, pending)
    while pending:
        k = pending.pop()
        ns[k] = _rebind_one(ns[k], ns, pending)
    return out


def _rebind_one(obj: Any, ns: dict, pending: list) -> Any:
    if isinstance(obj, types.FunctionType):
        if obj.__module__ != "__main__" or obj.__globals__ is ns:
            return obj
        for k, v in list(obj.__globals__.items()):
            if k not in ns and not k.startswith("__"):
                ns[k] = v
                pending.append(k)
        f = types.FunctionType(obj.__code__, ns, obj.__name__, obj.__defaults__, obj.__closure__)
        f.__kwdefaults__, f.__qualname__, f.__doc__ = obj.__kwdefaults__, obj.__qualname__, obj.__doc__
        f.__dict__.update(obj.__dict__)
        f.__module__ = "__main__"
        try:
            f.__annotations__ = obj.__annotations__
        except Exception:
            pass
        return f
    cls = obj if isinstance(obj, type) else type(obj)
    for c in getattr(cls, "__mro__", ()):
        if c.__dict__.get("__module__") != "__main__":
            continue
        for k, v in list(vars(c).items()):
            new = v
            if isinstance(v, types.FunctionType):
                new = _rebind_one(v, ns, pending)
            elif isinstance(v, (staticmethod, classmethod)) and isinstance(v.__func__, types.FunctionType):
                fn = _rebind_one(v.__func__, ns, pending)
                new = v if fn is v.__func__ else type(v)(fn)
            elif type(v) is property:
                parts: list[Any] = [_rebind_one(f, ns, pending) if isinstance(f, types.FunctionType) else f
                                     for f in (v.fget, v.fset, v.fdel)]
                if any(p is not f for p, f in zip(parts, (v.fget, v.fset, v.fdel), strict=True)):
                    new = property(parts[0], parts[1], parts[2], v.__doc__)
            if new is not v:
                try:
                    setattr(c, k, new)
                except Exception:
                    pass
    return obj


_TRANSFORMERS_KEY = "\x00crane-transformers"  # (kernel/transformers.TRANSFORMERS_KEY)


def _set_transformers(shell: Any, carried: Any, ns: dict) -> None:
    """The kernel's cell transformers (kernel/transformers.py) on this worker's shell, so `transform_cell` and
    `transform_ast` rewrite the cell as the kernel's shell does (issue 42, h1): each list the kernel's export read,
    in its order, IPython's own transforms as this interpreter's IPython holds them (the kernel's executable: the
    same IPython), the notebook's as copied, its functions bound to the namespace as the notebook's own are
    (`_rebind`). They run here only, as the cell's code: under the run's confinement."""
    if type(carried) is not dict:
        return
    from IPython.core import inputtransformer2

    own = vars(inputtransformer2)

    def entries(key: str) -> list:
        out = []
        for kind, x in carried.get(key) or ():
            if kind == "ipython":
                out.append(own[x])
            else:
                out.append(_rebind(x, ns))  # (an instance: its notebook class's methods)
        return out

    manager = shell.input_transformer_manager
    if "post" in carried:
        shell.input_transformers_post = entries("post")
    if "cleanup" in carried:
        manager.cleanup_transforms = entries("cleanup")
    if "line" in carried:
        manager.line_transforms = entries("line")
    if "token" in carried:
        manager.token_transformers = entries("token")
    if "ast" in carried:
        shell.ast_transformers = entries("ast")


def _map_devices(facts: dict, force: bool) -> bool:
    """torch: cuda/mps requests answered on the CPU with every tensor's device kept (worker/devices.py)."""
    return map_devices(facts, force)


def _unconfinable(system: str) -> str | None:
    """The worker's side of the platform switch (crane.sandbox.confinement): None where `_prepare_child`
    confines it (Linux), else why no run is made (macOS `sandbox_init`, Windows job objects: not implemented)."""
    if system.startswith("linux"):
        return None
    name = {"darwin": "macOS", "win32": "Windows", "cygwin": "Windows"}.get(system, system)
    how = {"macOS": " (sandbox_init is not implemented)", "Windows": " (job objects are not implemented)"}.get(name, "")
    return f"{name}: no confinement for a transplant worker{how}; the run is not made"


class _Unknown:
    """An original's index the kernel did not send (too large): any label may have been in it."""

    def __contains__(self, key: object) -> bool:
        return True


class _Found:
    def __init__(self, value: bool) -> None:
        self.value = value

    def any(self) -> bool:
        return self.value


class _KnownColumn:
    """A label-like column of an original: its dtype and the sorted hashes of its distinct values (None: not
    sent, any value may have been in it)."""

    class dtype:  # noqa: N801 - read as `col.dtype.kind` by kernel/miniature
        kind = "O"

    ndim = 1

    def __init__(self, known: dict | None) -> None:
        self.known = known

    def __eq__(self, key: object) -> _Found:  # type: ignore[override]  # elementwise, as pandas' `col == key`
        hashes = (self.known or {}).get("hashes")
        if hashes is None:
            return _Found(True)
        np, pd = sys.modules.get("numpy"), sys.modules.get("pandas")
        if np is None or pd is None:
            return _Found(True)
        try:
            arr = np.array([key], dtype=self.known["dtype"])  # type: ignore[index]  # set: `hashes` came from it
        except Exception:
            return _Found(False)  # no value of the column's dtype equals it
        try:
            h = pd.util.hash_array(arr)[0]
            i = int(np.searchsorted(hashes, h))
            return _Found(bool(i < len(hashes) and hashes[i] == h))
        except Exception:
            return _Found(True)

    __hash__ = object.__hash__


class _Original(_KnownColumn):
    """What the worker knows of a value the kernel shrank before the copy: enough for kernel/miniature's `artefact`
    (is a missing label one the subset dropped?) without the original itself."""

    def __init__(self, known: dict) -> None:
        cols = dict(known.get("columns") or {})
        super().__init__(cols.get(None))
        self.index = known["index"] if known.get("index") is not None else _Unknown()
        self.columns = [c for c in cols if c is not None]
        self._cols = cols

    def __getitem__(self, col: Any) -> _KnownColumn:
        return _KnownColumn(self._cols.get(col))


def _register_shrunk(known: list, ns: dict) -> None:
    """kernel/miniature's record of what was replaced, as a miniature run in a fork has it (its `artefact` reads the
    kept and original row counts and asks the originals whether a missing label was dropped)."""
    import ast
    _REGISTRY["objects"].clear()
    for item in known:
        label = str(item["label"])
        new = ns.get(label)
        if new is None and "[" in label:
            name, _, key = label.partition("[")
            try:
                new = ns[name][ast.literal_eval(key[:-1])]
            except Exception:
                new = None
        orig = _Original(item["known"]) if item.get("known") is not None else None
        _REGISTRY["objects"].append((label, item["kind"], orig, new, int(item["n"]), int(item["k"])))


def _apply_settings(facts: dict) -> list[str]:
    """The kernel's interpreter and library settings a fresh interpreter lacks (kernel/export `_settings`): each
    library's through shared/carry.py (applied, then read back and compared: what differs is `settings_missed`,
    and a crash that rests on it is only "likely"), torch's here. Returns what it added to `settings_missed`."""
    st = facts.get("settings") or {}
    missed = list(apply_carried(st))
    try:
        _torch_settings(st)
    except Exception:
        missed.append("torch")  # a crash in torch then stays "likely" (transplant.crash_certain)
    _W["settings_missed"].extend(missed)
    return missed


def _hash_missed(facts: dict, loaded: dict) -> list[str]:
    """What the copy misses of the kernel's string hashes (red team round 17h, F8): `hash_differs` where this worker
    hashes the kernel's probe string otherwise than the kernel did (not the same `PYTHONHASHSEED`,
    transplant.worker_env: a cell's `hash()` of a string differs), and `str_set:<name>` for each loaded name whose
    value holds a set of strings (or of tuples of them): rebuilt here, it iterates in another order than in the
    kernel, even with equal hashes (transplant.state_doubt reads which the cell iterates). Only builtin containers
    are looked into (no attribute of a loaded object is read: the load is not the cell's)."""
    want = facts.get("str_hash")
    out = ["hash_differs"] if type(want) is int and hash(STR_HASH_PROBE) != want else []
    return out + [f"str_set:{name}" for name, v in loaded.items()
                  if type(name) is str and not name.startswith("\x00") and _str_set(v, 2)][:50]


def _str_set(v: Any, depth: int) -> bool:
    """`v` is, or holds within `depth` levels of builtin lists, tuples and dicts, a set of strings
    (shared/carry.str_set)."""
    t = type(v)
    if t is set or t is frozenset:
        return str_set(v)
    if depth <= 0:
        return False
    items = v[:256] if t is list or t is tuple else dict.values(v) if t is dict else ()
    for n, x in enumerate(items):
        if n >= 256:
            break
        if _str_set(x, depth - 1):
            return True
    return False


def _torch_settings(st: dict) -> None:
    ts = st.get("torch")
    torch = sys.modules.get("torch")
    if ts and torch is not None:
        torch.set_default_dtype(getattr(torch, str(ts["default_dtype"]).rpartition(".")[2]))
        torch.set_grad_enabled(bool(ts["grad_enabled"]))
        torch.use_deterministic_algorithms(bool(ts["deterministic"]), warn_only=bool(ts["deterministic_warn_only"]))
        torch.autograd.set_detect_anomaly(bool(ts["anomaly"]))
        torch.set_float32_matmul_precision(str(ts["matmul_precision"]))
        if ts.get("rng"):
            torch.random.set_rng_state(torch.tensor(list(bytes.fromhex(ts["rng"])), dtype=torch.uint8))
        if ts.get("num_threads") and torch.get_num_threads() != ts["num_threads"]:
            torch.set_num_threads(int(ts["num_threads"]))
        if ts.get("printoptions"):
            torch.set_printoptions(**ts["printoptions"])


def _register_accessors(accessors: list | None) -> None:
    """Pandas accessors the notebook registered, registered again on the copied classes."""
    pd = sys.modules.get("pandas")
    if pd is None:
        return
    import warnings
    for target, name, cls in accessors or ():
        reg = {"DataFrame": pd.api.extensions.register_dataframe_accessor,
               "Series": pd.api.extensions.register_series_accessor,
               "Index": pd.api.extensions.register_index_accessor}.get(target)
        if reg is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reg(name)(cls)


_NO_METHOD = object()  # (a carried method's class had no attribute of that name before the worker set it)


def _register_patched(methods: Iterable | None, ns: dict) -> list:
    """The methods the notebook added to or replaced on library classes (kernel/environment._patched_methods), set
    again on the worker's classes (the class came by reference, the function by value), once the namespace is
    filled: each function bound to it as the notebook's own functions are (`_rebind`: it reads the names the cell
    binds, `factor = 0` then `df.double()`, never a copy of the kernel's globals), static and class methods over
    their function. Never on a class of the standard library's or of a library CRANE's worker runs
    (kernel/library.carriable_module: checked here again, the class's own `__module__`). What it set, as
    [(class, name, the value before, the value set)], for `_lift_patched` (review r1 H1, M1)."""
    set_: list = []
    for cls, name, value in methods or ():
        if not isinstance(cls, type) or type(name) is not str:
            continue
        try:
            mod = type.__dict__["__module__"].__get__(cls, type)
        except Exception:  # noqa: BLE001 - (a heap type with no `__module__`)
            continue
        if not carriable_module(mod):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = type(value)(_rebind(value.__func__, ns))
        else:
            value = _rebind(value, ns)
        before = type.__dict__["__dict__"].__get__(cls, type).get(name, _NO_METHOD)
        setattr(cls, name, value)
        set_.append((cls, name, before, value))
    return set_


_NO_ATTR = object()


def _set_library_attrs(items: Iterable | None, ns: dict) -> list[str]:
    """What an earlier cell put on library modules and classes that the cell reads (kernel/library_attrs.py:
    `np.float = float`, tqdm's `progress_apply` on pandas' classes), set on the worker's where it lacks the name, or
    (`replace`: a value of another package than the owner's) where its own differs: by identity (a value pickled by
    reference is the worker's own object: nothing to do), plain values by equality (NaN equal to NaN), partials by
    their function, arguments and keywords (a library's own partial arrives as a copy). Read from the owner's own
    dict (a module's `__getattr__` never runs). Never on a library CRANE's worker runs, nor another value for a name
    a standard library module has (checked here again). Returns `libattr:<module>:<name>` for each it could not set
    or that the worker holds otherwise and may not replace (the notebook's function over a library's,
    `torch.load = my_load`): a verdict of a cell reading the name is then only likely (transplant.state_doubt)."""
    missed: list[str] = []
    for owner, name, value, replace in items or ():
        if type(name) is not str:
            continue
        is_class = isinstance(owner, type)
        try:
            mod = type.__dict__["__module__"].__get__(owner, type) if is_class else owner.__name__
            own = type.__dict__["__dict__"].__get__(owner, type) if is_class else vars(owner)
            now = own.get(name, _NO_ATTR)
        except Exception:  # noqa: BLE001 - (a heap type with no `__module__`)
            continue
        if type(mod) is not str or not carriable_module(mod) and (
                is_class or mod.partition(".")[0] not in sys.stdlib_module_names):
            continue
        if _same_value(now, value):
            continue
        if now is not _NO_ATTR and (not replace or not carriable_module(mod)):
            # (a name the worker's has: only another package's value replaces it, never on the standard library's,
            # whose code CRANE's worker runs)
            missed.append(f"libattr:{mod}:{name}")
            continue
        try:
            setattr(owner, name, _rebind(value, ns))  # (the notebook's function reads the namespace, as in the kernel)
        except Exception:  # noqa: BLE001 - (a read-only attribute: the crash on it is only likely)
            missed.append(f"libattr:{mod}:{name}")
    return missed


def _same_value(now: Any, value: Any) -> bool:
    """The worker's `now` holds what the kernel's `value` is: the very object, an equal plain value, or a partial of
    the same function with equal arguments."""
    if now is value:
        return True
    t = type(value)
    if type(now) is not t:
        return False
    if t in (bool, int, float, complex, str, bytes):
        return bool(now == value) or t is float and now != now and value != value
    if t is functools.partial:
        try:
            return bool(now.func is value.func and now.args == value.args and now.keywords == value.keywords)
        except Exception:  # noqa: BLE001 - (arguments whose comparison fails: not the same)
            return False
    return False


def _lift_patched(set_: list, methods: dict) -> None:
    """A session's carried methods (`_register_patched`'s `set_`) taken off their classes, which get back what
    they held before (last set, first lifted), so that a later `load` unpickles with no method of the notebook's
    on a library class (a carried `__setstate__` ran in the load, the audit hook bypassed and CRANE's frames in
    reach: review r1 M3); `_command` sets them again, bound anew, after it. A method a session command replaced
    or removed since is the session's own: left as it is, and dropped from `methods` (the session's carried
    methods by (id(class), name)) for good, as a name a command bound is never loaded over."""
    for cls, name, before, value in reversed(set_):
        now = type.__dict__["__dict__"].__get__(cls, type).get(name, _NO_METHOD)
        if now is not value:
            methods[(id(cls), name)] = None
            continue
        try:
            if before is _NO_METHOD:
                delattr(cls, name)
            else:
                setattr(cls, name, before)
        except Exception:  # noqa: BLE001 - (left on the class: set again after the load)
            pass
    set_.clear()


def _fail(ctx: _Ctx, why: str) -> None:
    _write_json(ctx.result_fd, {"verdict": "unavailable", "reason": why})
    os.close(ctx.result_fd)


def _kernel_environment(facts: dict) -> None:
    """The kernel's whole environment, once the worker is confined (it started with an allowlisted part:
    transplant.worker_env)."""
    keep = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    os.environ.clear()
    os.environ.update(facts.get("env") or {})
    os.environ.update(keep)


_KERNEL_FUTURE_FLAGS = 0x1FE0000  # the `__future__` features' compiler flags (kernel/environment.FUTURE_FLAGS)


def _enter_environment(facts: dict, shell: Any) -> None:
    """The kernel's cwd, `sys.path`, library modules and display setting (its environment comes once the worker
    is confined: `_kernel_environment`)."""
    try:
        os.chdir(facts["cwd"])
    except OSError:
        pass
    sys.path[:] = list(facts.get("path") or sys.path)
    _import(facts.get("modules") or [], only_library=True)
    _no_gpu_plugins()
    shell.ast_node_interactivity = facts.get("interactivity") or "last_expr"
    flags = facts.get("compile_flags")
    if type(flags) is int:  # the kernel's cells' `__future__` features (round 12, h7: a later cell's annotations
        shell.compile.flags |= flags & _KERNEL_FUTURE_FLAGS  # were evaluated here: a false certain NameError)
    _set_formats(shell, facts.get("formats"))
    if facts.get("autoawait") is False:  # `%autoawait off` in the kernel: a top-level `await` is its SyntaxError
        shell.autoawait = False  # (issue 42 part 2, h10: the worker ran it)
    argv = facts.get("argv")
    if type(argv) is list and all(type(a) is str for a in argv):  # (round 16, F5: `parse_args()` reads it)
        sys.argv[:] = argv
    _as_kernel_shell(shell, facts.get("shell_class"))
    import asyncio  # noqa: F401  (a kernel's ipykernel holds it; IPython 9 alone does not import it)
    bind_asyncio()  # (the cell's statements run as in a kernel's running loop: kernel/run._kernel_like_loop)


def _as_kernel_shell(shell: Any, name: Any) -> None:
    """The worker's shell as the kernel's is seen by the notebook (round 16, F2/F5): its class named as the kernel's
    shell class (`type(get_ipython()).__name__ == 'ZMQInteractiveShell'` tells a notebook from a terminal), and, in a
    Jupyter kernel, `enable_gui` as ipykernel's: `%matplotlib inline` (which asks for no event loop) and a known
    loop's name are taken (the loop would only start once the kernel's own loop runs), another name is IPython's
    UsageError; the terminal shell's raised NotImplementedError, a certain false crash of `%matplotlib inline`."""
    if type(name) is not str or not name.isidentifier() or type(shell).__name__ == name:
        return
    from IPython.core.error import UsageError

    def enable_gui(self: Any, gui: Any = None) -> None:
        if gui not in _KERNEL_LOOPS:
            raise UsageError(f"Invalid GUI request {gui!r}, valid ones are:{sorted(str(k) for k in _KERNEL_LOOPS)}")
        self.active_eventloop = gui

    members: dict = {"__module__": type(shell).__module__}
    if name == "ZMQInteractiveShell":
        members.update(__module__="ipykernel.zmqshell", enable_gui=enable_gui)
    shell.__class__ = type(name, (type(shell),), members)


# ipykernel's event loops (ipykernel/eventloops.py `loop_map`): what its shell's `enable_gui` accepts
_KERNEL_LOOPS = frozenset((None, "inline", "nbagg", "webagg", "notebook", "ipympl", "widget", "qt", "qt5", "qt6",
                           "wx", "tk", "gtk", "gtk3", "gtk4", "osx", "asyncio"))


def _set_formats(shell: Any, formats: Any) -> None:
    """The kernel's display formatters switched off or on, and its active types (kernel/environment._formats): the
    cell's value is formatted as the kernel's display hook formats it (a `_repr_html_` that raises is an error only
    where the kernel's HTML formatter is on)."""
    if type(formats) is not dict:
        return
    disp = shell.display_formatter
    active = formats.get("active")
    if type(active) is list:
        disp.active_types = [t for t in active if type(t) is str]
    for mime, on in formats.items():
        f = disp.formatters.get(mime) if type(mime) is str else None
        if f is not None and type(on) is bool:
            f.enabled = on


def _no_gpu_plugins() -> None:
    """The worker never uses a GPU (JAX_PLATFORMS=cpu), but JAX still loads every installed PJRT plugin when its
    backends start: a GPU plugin maps hundreds of MiB, past the confinement's address-space limit (on a lent
    H200 with jax 0.11.2 the mapping failed, the CPU client then could not create its threads, and the worker
    died loading the state). Plugin discovery is skipped; JAX's own CPU backend is not a plugin."""
    xb = sys.modules.get("jax._src.xla_bridge")
    if xb is not None and callable(getattr(xb, "discover_pjrt_plugins", None)):
        vars(xb)["discover_pjrt_plugins"] = lambda: None


def _session(spec: dict, shell: Any, lines: _Lines) -> None:
    """A transplant session (crane.sandbox.transplant_session): confined in the blocking confinement (no
    processes), then JSON-line commands from the session's FIFO, replies on the result FIFO (a portable session:
    commands down the worker's stdin pipe, replies up its stdout pipe), as a forked
    session's (kernel/session) but for `load`: bind the names of one more export of the kernel's state (names the
    session's own code bound are kept). Checkpoints are the daemon's (a new worker replays the runs)."""
    args = check_request(dict(spec["args"]))
    d = args["dir"]
    with open(os.path.join(d, "env.json")) as f:
        facts = json.load(f)
    _enter_environment(facts, shell)
    _POOLS["key"] = None
    portable = None  # -- portable sandbox (worker/portable.py): the call guard and the audit hook, no OS part
    if args.get("confinement") in ("portable", "guard"):
        ctx, portable = prepare_portable(args, shell, lines.out)  # commands on stdin, replies on stdout
        fd, buf = lines.fd, lines.buf
    else:  # -- end portable
        lines.close()
        why = _unconfinable(sys.platform)
        if why:
            out = os.open(os.path.join(d, "result"), os.O_WRONLY)
            _write_json(out, {"event": "error", "reason": why})
            os.close(out)
            return
        ctx = _prepare_child(args, shell, os.getppid(), False)  # confined from here on (blocking: no processes)
        fd, buf = ctx.cmd_fd, b""
    sealed = sys.platform.startswith("linux")  # each reply sealed: the daemon reads the seal in /proc (issue 41)
    if sealed:
        _track_channel(ctx.result_fd)
        _bind_hooks()  # (a command's hooks stop before its reply is made: kernel/session._hooks_off)
    _kernel_environment(facts)  # the kernel's environment, once confined (worker_env: an allowlist before)
    if sealed:
        _keep_start_hooks()  # (the first command's handlers and collector, whatever CRANE's replies before it did)
    state: dict = {"imported": False, "mapped": False}
    paths = (os.path.join(d, "stdout"), os.path.join(d, "stderr"))
    _write_json(ctx.result_fd, {"event": "ready", "pid": os.getpid(), "depth": 0, "confinement": ctx.confinement})
    if sealed:
        # the loop is a copy of `_serve_sealed` whose constants hold what its check and its sealed waits read, taken
        # before any command; CRANE's part runs untraced, each command's code through sys.call_tracing — but where
        # the portable call guard is a per-call hook (no OS layer: it must see the code CRANE's frames run for the
        # cell, an exception's text) and refuses hooks and frame walks itself
        serve = _sealed_copy(_serve_sealed, _session_constants(ctx, portable, fd))
        if portable is None or portable.guard.lean:
            ctx.untraced = True
            _untraced(serve, spec, facts, state, paths, buf)
        else:
            serve(spec, facts, state, paths, buf)
        return
    commands: Iterable[bytes] = _session_lines(fd) if portable is None else lines.commands()
    end = _real_exit()  # bound before any command's code runs
    for line in commands:  # (no seal where no /proc is read: macOS, Windows)
        before = _fence()
        reply, _ = _command(ctx, portable, line, spec, facts, state, paths)
        if not before <= _fence():  # (frozen pairs: kernel/common._fence)
            end(_TAMPERED)  # it rebound CRANE's own code: no reply at all (the daemon restores the session)
        ctx.audit_state["bypass"] = True
        _write_json(ctx.result_fd, reply)
        ctx.audit_state["bypass"] = False


def _sealed_copy(template: Any, taken: dict[str, Any]) -> Any:
    """A copy of `template` whose string constants named in `taken` hold those objects (kernel/run._fenced), each
    as a builtin method bound to it (`object.__sizeof__`'s; None's own): read back through its `__self__`, which
    nothing can rebind, and hashable by identity, so the copy's code object stays hashable (the portable guard and
    audit hook key their caches by code object; a dict or a ctypes object among its constants is not hashable)."""
    return _fenced(template, {k: None.__sizeof__ if v is None else object.__sizeof__.__get__(v)
                              for k, v in taken.items()})


def _session_constants(ctx: _Ctx, portable: Any, fd: int) -> dict[str, Any]:
    """What `_serve_sealed`'s copy reads from its constants: the fence's snapshot and what the check and the sealed
    waits are made with (kernel/run._seal_constants), the session's context, its call guard, the command pipe and a
    buffer for the sealed read, the reply channel and its writer, the real `_exit` — all bound before any command."""
    import _ctypes
    import ctypes
    room = bytearray(1 << 16)  # (read back as the bytearray, a C type: never through a ctypes object's `raw`)
    pin = ctypes.c_char.from_buffer(room)  # (the export pins it: never resized or moved while the worker lives)
    taken = _seal_constants(-1)
    taken.update({"<ctx>": ctx, "<portable>": portable, "<fd>": fd, "<room>": (room, pin),  # (the pin held there)
                  "<room_at>": ctypes.addressof(pin).to_bytes(8, sys.byteorder),  # (as the read's 64-bit argument)
                  "<errno>": _ctypes.get_errno, "<out>": ctx.result_fd, "<send>": _write_json, "<end>": _real_exit()})
    taken.update(_kept_constants(ctypes))
    return taken


def _kept_constants(ctypes: Any) -> dict[str, Any]:
    """What a sealed session's signal step keeps of a command's state for the next one (issue 41): before each reply
    every signal is blocked by the raw rt_sigprocmask(2) and the collector stopped (kernel/run._quiet_constants), and
    the worker waits for the next command so; that command starts with the signal mask, the collector's state and
    the unraisable hook the last one left (its handlers come back through kernel/session._hooks_on). `<kept>`: the
    mask (8 bytes, filled by the raw call through `<kept_at>`) and the collector's state (byte 8), pinned;
    `<hooks>`: the unraisable hook. Only the next command's own state is kept there: nothing CRANE's reply or seal
    reads."""
    import gc
    kept = bytearray(16)
    pin = ctypes.c_char.from_buffer(kept)  # (held in the constants beside it: never resized or moved)
    mask = 0
    for s in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        mask |= 1 << (int(s) - 1)
    kept[:8] = mask.to_bytes(8, sys.byteorder)
    kept[8] = 1 if gc.isenabled() else 0
    return {"<kept>": (kept, pin), "<kept_at>": ctypes.addressof(pin).to_bytes(8, sys.byteorder),
            "<hooks>": [sys.unraisablehook], "<gc_on>": gc.enable, "<gc_is>": gc.isenabled,
            "<set_byte>": bytearray.__setitem__, "<set_at>": list.__setitem__}


def _serve_sealed(spec: dict, facts: dict, state: dict, paths: tuple[str, str], buf: bytes) -> None:
    """A sealed session's commands until EOF (a template: `_session` runs a copy whose string constants are
    `_session_constants`). Each wait for the next command is CRANE's sealed read(2) (shared/seal: the mark, the code
    — a literal where it is made: 1 where the last command ended clean, 2 where its code raised, from CRANE's control
    flow in kernel/session.run_command / evaluate — and the digest of every byte CRANE wrote on the channel since the
    last command: its reply, or the ready line); the daemon takes a reply only when it sees this worker waiting
    sealed over exactly the bytes it read, and one that says it ran clean only under the clean code
    (crane.sandbox.transplant_session). After each command, before its reply, the fence's check from the constants
    alone (kernel/run._cell_then_seal): a command that rebound CRANE's code or what it runs on ends the worker with
    `_TAMPERED`, no reply. No local of this frame is read by the check or the seal but `raised` and `sent`, assigned
    after the command's code returned: the branch on `raised` comes right after it is assigned, `sent` is what the
    seal's digest names (a thread the command left could, on 3.13, write it: the seal then matches nothing)."""
    sent, buf = _sent(), buf.lstrip()  # before any command: CRANE's ready line, sealed clean
    while b"\n" not in buf:  # sealed: CRANE's ready line (SEAL_CLEAN, 1)
        got = "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), 0,  # type: ignore[attr-defined]
                                "<fd>".__self__, "<copy>".__self__("<u64>".__self__, "<room_at>".__self__),  # type: ignore[attr-defined]
                                1 << 16, 1, "<copy>".__self__("<u64>".__self__, "<to>".__self__(  # type: ignore[attr-defined]
                                    "<int>".__self__("<hash>".__self__(sent, digest_size=8).digest(),  # type: ignore[attr-defined]
                                                     "little"), 8, "<order>".__self__)),  # type: ignore[attr-defined]
                                "<copy>".__self__("<u64>".__self__, "<mark>".__self__))  # type: ignore[attr-defined]
        if got <= 0:
            if got < 0 and "<errno>".__self__() == 4:  # type: ignore[attr-defined]  # EINTR
                continue
            return
        _track_channel("<out>".__self__)  # type: ignore[attr-defined]  # (the next reply's bytes counted afresh)
        buf = (buf + "<room>".__self__[0][:got]).lstrip()  # type: ignore[attr-defined]
    while True:
        # the command starts with the signal mask, the collector and the unraisable hook the last one left (the seal's
        # signal step blocked, stopped and replaced them: `_kept_constants`)
        "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), "<nr_mask>".__self__, 2,  # type: ignore[attr-defined]
            "<copy>".__self__("<u64>".__self__, "<kept_at>".__self__), 0, 8)  # type: ignore[attr-defined]
        "<setitem>".__self__("<sysdict>".__self__, "unraisablehook", "<hooks>".__self__[0])  # type: ignore[attr-defined]
        if "<kept>".__self__[0][8] == 1:  # type: ignore[attr-defined]
            "<gc_on>".__self__()  # type: ignore[attr-defined]
        line, buf = buf.split(b"\n", 1)
        buf = buf.lstrip()
        reply, raised = _command("<ctx>".__self__, "<portable>".__self__,  # type: ignore[attr-defined]
                                 line, spec, facts, state, paths)
        # (the branch right after the assignment: no switch to another thread in between, GIL builds)
        if raised is False:
            try:  # (tries run out, or a handler of the command's raised between the passes' own `try`s: `_TAMPERED`)
                # the command's mask, collector and unraisable hook, kept for the next command (`_kept_constants`)
                "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), "<nr_mask>".__self__, 0,  # type: ignore[attr-defined]
                    "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)),  # type: ignore[attr-defined]
                    "<copy>".__self__("<u64>".__self__, "<kept_at>".__self__), 8)  # type: ignore[attr-defined]
                "<set_byte>".__self__("<kept>".__self__[0], 8, "<gc_is>".__self__())  # type: ignore[attr-defined]
                "<set_at>".__self__("<hooks>".__self__, 0, "<get>".__self__("<sysdict>".__self__, "unraisablehook"))  # type: ignore[attr-defined]
                for _ in "<tries>".__self__:  # type: ignore[attr-defined]  # (passes until one ran no code of the command's: run._quiet_constants)
                    try:
                        "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                            "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
                        "<setitem>".__self__("<sysdict>".__self__, "unraisablehook", "<hook>".__self__)  # type: ignore[attr-defined]
                        for s in "<signals>".__self__:  # type: ignore[attr-defined]
                            if "<callable>".__self__("<getsignal>".__self__(s)):  # type: ignore[attr-defined]
                                "<signal>".__self__(s, "<ign>".__self__)  # type: ignore[attr-defined]
                    except BaseException:  # noqa: BLE001, S110 - a handler of the command's ran (and raised): checked below
                        pass
                    if "<any>".__self__("<map>".__self__("<callable>".__self__, "<map>".__self__(  # type: ignore[attr-defined]
                            "<getsignal>".__self__, "<signals>".__self__))) is False and "<is>".__self__(  # type: ignore[attr-defined]
                            "<get>".__self__("<sysdict>".__self__, "unraisablehook"), "<hook>".__self__) is True:  # type: ignore[attr-defined]
                        break  # no handler of the command's is set, nor its unraisable hook: none of its code runs now
                else:  # (tries ran out: a handler of the command's still set; no reply)
                    "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
            except BaseException:  # noqa: BLE001 - a handler of the command's raised between the passes' `try`s
                "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
            "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
            "<gc_off>".__self__()  # type: ignore[attr-defined]
            if "<le>".__self__("<before>".__self__, "<fn>".__self__(  # type: ignore[attr-defined]
                    "<fence>".__self__, "<dict>".__self__(  # type: ignore[attr-defined]
                        "<globals>".__self__, __builtins__="<dict>".__self__("<builtins>".__self__)))(  # type: ignore[attr-defined]
                    "<space>".__self__, "<modules>".__self__, "<module>".__self__)) is not True:  # type: ignore[attr-defined]
                "<end>".__self__(87)  # type: ignore[attr-defined]  # (_TAMPERED: the daemon restores the session)
            "<ctx>".__self__.audit_state["bypass"] = True  # type: ignore[attr-defined]
            sent = "<send>".__self__("<out>".__self__, reply)  # type: ignore[attr-defined]
            "<ctx>".__self__.audit_state["bypass"] = False  # type: ignore[attr-defined]
            while b"\n" not in buf:  # sealed: the command ended clean (SEAL_CLEAN, 1)
                got = "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), 0,  # type: ignore[attr-defined]
                                        "<fd>".__self__, "<copy>".__self__("<u64>".__self__, "<room_at>".__self__),  # type: ignore[attr-defined]
                                        1 << 16, 1, "<copy>".__self__("<u64>".__self__, "<to>".__self__(  # type: ignore[attr-defined]
                                            "<int>".__self__("<hash>".__self__(line + b"\n" + sent,  # type: ignore[attr-defined]
                                                                               digest_size=8).digest(), "little"), 8, "<order>".__self__)),  # type: ignore[attr-defined]
                                        "<copy>".__self__("<u64>".__self__, "<mark>".__self__))  # type: ignore[attr-defined]
                if got <= 0:
                    if got < 0 and "<errno>".__self__() == 4:  # type: ignore[attr-defined]  # EINTR
                        continue
                    return
                _track_channel("<out>".__self__)  # type: ignore[attr-defined]  # (the next reply's bytes counted afresh)
                buf = (buf + "<room>".__self__[0][:got]).lstrip()  # type: ignore[attr-defined]
        else:
            try:  # (tries run out, or a handler of the command's raised between the passes' own `try`s: `_TAMPERED`)
                # the command's mask, collector and unraisable hook, kept for the next command (`_kept_constants`)
                "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), "<nr_mask>".__self__, 0,  # type: ignore[attr-defined]
                    "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)),  # type: ignore[attr-defined]
                    "<copy>".__self__("<u64>".__self__, "<kept_at>".__self__), 8)  # type: ignore[attr-defined]
                "<set_byte>".__self__("<kept>".__self__[0], 8, "<gc_is>".__self__())  # type: ignore[attr-defined]
                "<set_at>".__self__("<hooks>".__self__, 0, "<get>".__self__("<sysdict>".__self__, "unraisablehook"))  # type: ignore[attr-defined]
                for _ in "<tries>".__self__:  # type: ignore[attr-defined]  # (passes until one ran no code of the command's: run._quiet_constants)
                    try:
                        "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                            "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
                        "<setitem>".__self__("<sysdict>".__self__, "unraisablehook", "<hook>".__self__)  # type: ignore[attr-defined]
                        for s in "<signals>".__self__:  # type: ignore[attr-defined]
                            if "<callable>".__self__("<getsignal>".__self__(s)):  # type: ignore[attr-defined]
                                "<signal>".__self__(s, "<ign>".__self__)  # type: ignore[attr-defined]
                    except BaseException:  # noqa: BLE001, S110 - a handler of the command's ran (and raised): checked below
                        pass
                    if "<any>".__self__("<map>".__self__("<callable>".__self__, "<map>".__self__(  # type: ignore[attr-defined]
                            "<getsignal>".__self__, "<signals>".__self__))) is False and "<is>".__self__(  # type: ignore[attr-defined]
                            "<get>".__self__("<sysdict>".__self__, "unraisablehook"), "<hook>".__self__) is True:  # type: ignore[attr-defined]
                        break  # no handler of the command's is set, nor its unraisable hook: none of its code runs now
                else:  # (tries ran out: a handler of the command's still set; no reply)
                    "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
            except BaseException:  # noqa: BLE001 - a handler of the command's raised between the passes' `try`s
                "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
            "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
            "<gc_off>".__self__()  # type: ignore[attr-defined]
            if "<le>".__self__("<before>".__self__, "<fn>".__self__(  # type: ignore[attr-defined]
                    "<fence>".__self__, "<dict>".__self__(  # type: ignore[attr-defined]
                        "<globals>".__self__, __builtins__="<dict>".__self__("<builtins>".__self__)))(  # type: ignore[attr-defined]
                    "<space>".__self__, "<modules>".__self__, "<module>".__self__)) is not True:  # type: ignore[attr-defined]
                "<end>".__self__(87)  # type: ignore[attr-defined]  # (_TAMPERED: the daemon restores the session)
            "<ctx>".__self__.audit_state["bypass"] = True  # type: ignore[attr-defined]
            sent = "<send>".__self__("<out>".__self__, reply)  # type: ignore[attr-defined]
            "<ctx>".__self__.audit_state["bypass"] = False  # type: ignore[attr-defined]
            while b"\n" not in buf:  # sealed: the command's code raised (SEAL_RAISED, 2)
                got = "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), 0,  # type: ignore[attr-defined]
                                        "<fd>".__self__, "<copy>".__self__("<u64>".__self__, "<room_at>".__self__),  # type: ignore[attr-defined]
                                        1 << 16, 2, "<copy>".__self__("<u64>".__self__, "<to>".__self__(  # type: ignore[attr-defined]
                                            "<int>".__self__("<hash>".__self__(line + b"\n" + sent,  # type: ignore[attr-defined]
                                                                               digest_size=8).digest(), "little"), 8, "<order>".__self__)),  # type: ignore[attr-defined]
                                        "<copy>".__self__("<u64>".__self__, "<mark>".__self__))  # type: ignore[attr-defined]
                if got <= 0:
                    if got < 0 and "<errno>".__self__() == 4:  # type: ignore[attr-defined]  # EINTR
                        continue
                    return
                _track_channel("<out>".__self__)  # type: ignore[attr-defined]  # (the next reply's bytes counted afresh)
                buf = (buf + "<room>".__self__[0][:got]).lstrip()  # type: ignore[attr-defined]


def _command(ctx: _Ctx, portable: Any, line: bytes, spec: dict, facts: dict, state: dict,
             paths: tuple[str, str]) -> tuple[dict, bool]:
    """One session command: (its reply, whether its code raised — said by where it ended, kernel/session)."""
    args, d, ns = ctx.args, ctx.args["dir"], ctx.shell.user_ns
    raised = False
    try:
        cmd = _json_line(line)  # (never through what a kept command changed: kernel/common._json_codec)
    except ValueError:
        cmd = None
    op = cmd.get("op") if type(cmd) is dict else None
    reply: dict = {"event": "error", "reason": "bad command"}
    if type(cmd) is dict:
        reply = {"event": "reply", "id": cmd.get("id"), "key": cmd.get("key"), "pid": os.getpid(), "depth": 0}
    if op in ("run", "eval") and portable is None and not state.get("snapshot"):  # before the session's first
        ctx.audit_state["bypass"] = True  # command: what exists is library code (worker/load_vet.py; review M2)
        try:
            snapshot_library(ns)  # (gc.get_objects is an audited event)
        finally:
            ctx.audit_state["bypass"] = False
        state["snapshot"] = True
    if type(cmd) is not dict:
        pass
    elif op == "load":
        if portable is not None:
            lift_limits(portable)  # (the next run's limit counts what this load adds)
        audit = ctx.audit_state
        audit["bypass"] = True  # loading the kernel's state is not the session's code
        try:
            if not state["imported"]:
                _import(facts.get("modules") or [], only_library=False)
                state["imported"] = True
            with open(os.path.join(d, str(cmd["state"])), "rb") as f:
                data = f.read()
            bufs = _load_buffers(d, [str(b) for b in cmd.get("buffers") or []])
            methods = state.setdefault("methods", {})  # (every load's carried methods; None: the session's own)
            _lift_patched(state.setdefault("patched", []), methods)  # (none of the notebook's on a class in the load)
            carried: list = []  # (the finalizers' tail after the namespace: worker/finalizers.py)
            if portable is None:  # (a command's code met in the load runs under the audit hook: worker/load_vet.py)
                loaded = audited_load(data, bufs, audit, ctx.denied, carried)
            else:  # (a method a command set on a library class runs in it as a command: review r1 M3)
                with guarded(portable):
                    loaded, fin = load_with_finalizers(data, bufs)
                carried.append(fin)
            _register_accessors(loaded.pop("\x00crane-accessors", None))
            transformers = loaded.pop(_TRANSFORMERS_KEY, None)
            for cls, name, value in loaded.pop("\x00crane-patched", None) or ():
                if methods.get((id(cls), name), ()) is not None:
                    methods[(id(cls), name)] = (cls, name, value)
            missed: list = []  # (this load's: its reply says them, transplant.copy_crash_certain: issue 42, h9)
            own = loaded.pop(OWN_MODULES_KEY, None)
            if not state.get("settings"):  # (the first load's: later ones would undo what the commands changed)
                missed.extend(_apply_settings(facts))
                missed.extend(apply_own_modules(own, facts.get("own_modules")))
                state["settings"] = True
            lib_attrs = loaded.pop("\x00crane-libattrs", None)
            keras = apply_keras(loaded.pop(KERAS_KEY, None))  # Keras graphs built whole
            _W["settings_missed"].extend(keras)
            missed.extend(keras)
            missed.extend(_hash_missed(facts, loaded))
            for name, obj in loaded.items():
                if name not in ns:
                    ns[name] = _rebind(obj, ns)
            state["patched"] = _register_patched([m for m in methods.values() if m], ns)  # (review r1 M1)
            missed.extend(_set_library_attrs(lib_attrs, ns))
            if transformers is not None and not state.get("transformers"):  # the kernel's, once: the session's
                _set_transformers(ctx.shell, transformers, ns)  # own commands may change them after (issue 42, h1)
                state["transformers"] = True
            if not state["mapped"]:
                state["mapped"] = _map_devices(facts.get("torch") or {}, bool(spec.get("map_devices")))
            audit["bypass"] = False  # (what the clear frees runs its finalizers as a command's would: review M4)
            loaded.clear()  # (nothing of the load holds a copied object now: a `del` frees what it frees in the kernel)
            obj = fin = None
            arm_finalizers(carried[0] if carried else None, lambda f: _rebind(f, ns))  # (worker/finalizers.py)
            carried.clear()
            reply["ok"], reply["missed"] = True, [str(m) for m in missed]
        except BaseException as exc:  # noqa: BLE001 - the session's next run is then unavailable
            reply.update({"ok": False, "reason": f"the kernel's state could not be loaded in a separate "
                                                 f"process: {type(exc).__name__}: {exc}"})
        finally:
            audit["bypass"] = False
    elif op == "run":
        if portable is not None:  # the run's resource limits (worker/limits.py), from what the worker holds now
            apply_limits(portable, args, float(cmd.get("budget_s", 10.0)))
        with guarded(portable):
            rec, raised = run_command(ctx, cmd, *paths)
        reply.update(rec)
    elif op == "eval":  # (the portable sandbox vets the expression's calls too)
        rec, raised = evaluate(ctx, cmd, lambda: guarded(portable))
        reply.update(rec)
    elif op == "close":
        os._exit(12)
    else:
        reply.update({"ok": False, "reason": f"unknown op {op!r} (a transplant session's checkpoints are the "
                                             "daemon's)"})
    return reply, raised


def _guard_arrow(run: Any) -> list[str]:
    def refuse(what: str, path: Any) -> None:
        run.refuse(what, "call guard", path)
    return guard_arrow(run.folder.inside, run._prepare_write, refuse, run.ctx.scratch, run._prepare_tree, run.translate)


def _refuse_frame_reads(run: Any) -> None:
    guard = run.guard

    def refuse(what: str) -> None:
        run.refuse(what, "call guard")
    refuse_frame_reads(lambda: guard.active, guard.is_user, refuse)


def _run(spec: dict, shell: Any, warm: bool, lines: _Lines) -> None:
    args = check_request(dict(spec["args"]))
    d = args["dir"]
    with open(os.path.join(d, "env.json")) as f:
        facts = json.load(f)
    t0 = time.perf_counter()
    _enter_environment(facts, shell)
    shrunk = spec.get("shrunk") or {}
    _POOLS["key"] = None  # the worker's own thread pools (not the kernel's)
    if sys.platform.startswith("linux"):  # its parent (the head, or the daemon) reads its seal in /proc (issue 41)
        args["sealed"] = os.getpid()
    portable = None  # -- portable sandbox (worker/portable.py): the call guard and the audit hook, no OS part
    if args.get("confinement") in ("portable", "guard"):
        ctx, portable = prepare_portable(args, shell, lines.out)  # the record goes up the worker's stdout pipe
        if args.get("sealed"):
            _track_channel(ctx.result_fd)  # what CRANE writes there is what the seal names (kernel/common)
            ctx.done_fd = int(spec.get("done_fd", -1))  # a head's fork child: the pipe that wakes the head
        ctx.confinement["descendants"] = hold_descendants()  # no process of the run outlives it (worker/reaper.py)
        ctx.confinement["arrow"] = _guard_arrow(portable)  # pyarrow's native writers vetted (worker/arrow.py)
        _refuse_frame_reads(portable)  # tracebacks' and generators' frames from user code (worker/frames.py)
    else:  # -- end portable
        lines.close()
        why = _unconfinable(sys.platform)
        if why:  # never an unconfined run: the daemon checks first (crane.sandbox.confinement), this holds anyway
            fd = os.open(os.path.join(d, "result"), os.O_WRONLY)
            _write_json(fd, {"verdict": "unavailable", "reason": why})
            os.close(fd)
            return
        ctx = _prepare_child(args, shell, os.getppid(), False)  # confined from here on (the platform's part)
    _kernel_environment(facts)  # the kernel's environment, once confined (worker_env: an allowlist before)
    t1 = time.perf_counter()
    audit = ctx.audit_state
    audit["bypass"] = True  # loading the state is not the cell's doing (the kernel-level confinement holds)
    had = set(sys.modules)  # (what the load imports: a head imports it before its next run, worker/head.py)
    try:
        _import(facts.get("modules") or [], only_library=False)
        with open(os.path.join(d, "state.pkl"), "rb") as sf:
            data = sf.read()
        state, carried = load_with_finalizers(data, _load_buffers(d, int(facts.get("buffers") or 0)))
        known = state.pop("\x00crane-shrunk", None) or []
        _register_accessors(state.pop("\x00crane-accessors", None))
        methods = state.pop("\x00crane-patched", None)
        transformers = state.pop(_TRANSFORMERS_KEY, None)
        _apply_settings(facts)
        lib_attrs = state.pop("\x00crane-libattrs", None)
        _W["settings_missed"].extend(apply_keras(state.pop(KERAS_KEY, None)))  # Keras graphs built whole
        _W["settings_missed"].extend(apply_own_modules(state.pop(OWN_MODULES_KEY, None), facts.get("own_modules")))
        _W["settings_missed"].extend(_hash_missed(facts, state))
        ns = shell.user_ns
        for name, obj in state.items():
            ns[name] = _rebind(obj, ns)
        _register_patched(methods, ns)  # (after the namespace is filled: review r1 M1)
        _W["settings_missed"].extend(_set_library_attrs(lib_attrs, ns))
        _set_transformers(shell, transformers, ns)  # (the cell is transformed as the kernel would: issue 42, h1)
        _register_shrunk(known, ns)
        mapped = _map_devices(facts.get("torch") or {}, bool(spec.get("map_devices")))
        state.clear()  # (nothing of the load holds a copied object now: a `del` frees what it frees in the kernel)
        obj = lib_attrs = None
        arm_finalizers(carried, lambda f: _rebind(f, ns))  # the kernel's finalizers on the copies (worker/finalizers)
        carried = None
    except BaseException as exc:  # noqa: BLE001 - never a false crash: the run is unavailable
        audit["bypass"] = False
        _fail(ctx, f"the cell's inputs could not be loaded in a separate process: {type(exc).__name__}: {exc}")
        return
    audit["bypass"] = False
    t2 = time.perf_counter()
    loaded = [m for m in list(sys.modules) if m not in had]
    ctx.kept = list(shrunk.get("kept") or [])  # shrunk in the kernel before the copy (kernel/export)
    if shrunk.get("requested") and not ctx.kept:
        why = shrunk.get("error") or "the cell reads no large DataFrame, array, tensor or dataset"
        _write_json(ctx.result_fd, {"verdict": "timeout", "reason": f"no miniature run: {why}"})
        os.close(ctx.result_fd)
        return
    steps = dict(ctx.steps)
    steps.update(environment=round((t1 - t0) * 1000.0 - float(ctx.steps.get("total", 0.0)), 3),
                 load=round((t2 - t1) * 1000.0, 3), total=round((time.perf_counter() - t0) * 1000.0, 3))
    _write_json(ctx.result_fd, {"event": "setup", "mode": ctx.mode, "reason": ctx.mode_reason,
                                "layer": ctx.layer, "fds": ctx.fds, "mappings": ctx.mappings, "steps": steps,
                                "pid": os.getpid(), "kept": ctx.kept,
                                "transplant": {"warm": warm, "devices_mapped": mapped,
                                               "preload_ms": _W["preload_ms"],
                                               "not_imported": list(_W["failed"])[:20],
                                               "loaded_modules": loaded[:LOADED_MAX],
                                               "settings_missed": list(_W["settings_missed"])}})
    if portable is not None:  # the run's resource limits (worker/limits.py), from what the worker holds now
        apply_limits(portable, args, float(args["budget_s"]))
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, float(spec.get("budget_s", 10.0)) + 1.5)
    if args.get("sealed"):
        # the cell, its record and the seal: a copy of `_copy_cell_then_seal` whose constants hold what the check after
        # the cell and the seal read, taken now (kernel/run._seal_constants); CRANE's part runs untraced, the cell
        # through sys.call_tracing (kernel/run._child_run, the fork path's twin) — but where the portable call guard
        # is a per-call hook (no OS layer: it must see what CRANE's frames run for the cell, the exception's text)
        # and refuses hooks and frame walks itself
        run = _sealed_copy(_copy_cell_then_seal, _seal_constants(ctx.done_fd))
        if portable is None or portable.guard.lean:
            ctx.untraced = True
            _untraced(run, ctx, portable, steps, facts)
        else:
            run(ctx, portable, steps, facts)
        return  # (not reached: the run ends sealed)
    fence, end = _fence, _real_exit()  # bound before the cell runs (kernel/common: no record once it rebinds them)
    before = fence()  # (no seal where no /proc is read: macOS, Windows)
    source, ns = args["source"], shell.user_ns
    seen: dict = {}
    if portable is not None:
        begin_portable(portable)
    t_cell = time.perf_counter()
    raised: BaseException | None = None
    try:
        _exec_plan(ctx, _cell_begins(ctx, source, seen), ns)
    except BaseException as e:  # noqa: BLE001 - the cell's own exception, SystemExit included
        raised = e
    rec = _cell_record(ctx, raised, source, seen, t_cell)  # (the guard still on: the exception's text is the cell's)
    _after_cell(ctx, portable)
    _record(ctx, _final_record(ctx, portable, rec, facts), steps["total"], before, fence, False, end)


def _copy_cell_then_seal(ctx: _Ctx, portable: Any, steps: dict, facts: dict) -> None:
    """The cell, then its record and the seal (a template: `_run` runs a copy whose string constants are
    kernel/run._seal_constants). How the cell ended is said by where the seal is made — one place for a raise, one
    for a clean end, the code a literal at each —, never by a value the cell could change. Whether anything the
    record is made or sealed with was rebound is checked after the record is out, and the seal made, from the run's
    constants alone: no global, no builtin of the module, no local but `sent` (kernel/run._cell_then_seal, the fork
    path's twin; each seal is shared/seal's `wait_sealed` written out)."""
    source, shell = ctx.args["source"], ctx.shell
    ns = shell.user_ns
    seen: dict = {}
    if portable is not None:
        begin_portable(portable)
    t_cell = time.perf_counter()
    try:
        _exec_plan(ctx, _cell_begins(ctx, source, seen), ns, untraced=True)
    except BaseException as e:  # noqa: BLE001 - the cell's own exception, SystemExit included
        rec = _cell_record(ctx, e, source, seen, t_cell)  # (the guard still on: the exception's text is the cell's)
        _after_cell(ctx, portable)
        rec = _final_record(ctx, portable, rec, facts)
        try:  # (tries run out, or a handler of the cell's raised between the passes' own `try`s: `_TAMPERED`)
            for _ in "<tries>".__self__:  # type: ignore[attr-defined]  # (passes until one ran no code of the cell's: run._quiet_constants)
                try:
                    "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                        "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
                    "<setitem>".__self__("<sysdict>".__self__, "unraisablehook", "<hook>".__self__)  # type: ignore[attr-defined]
                    for s in "<signals>".__self__:  # type: ignore[attr-defined]
                        if "<callable>".__self__("<getsignal>".__self__(s)):  # type: ignore[attr-defined]
                            "<signal>".__self__(s, "<ign>".__self__)  # type: ignore[attr-defined]
                except BaseException:  # noqa: BLE001, S110 - a handler of the cell's ran (and raised): checked below
                    pass
                if "<any>".__self__("<map>".__self__("<callable>".__self__, "<map>".__self__(  # type: ignore[attr-defined]
                        "<getsignal>".__self__, "<signals>".__self__))) is False and "<is>".__self__(  # type: ignore[attr-defined]
                        "<get>".__self__("<sysdict>".__self__, "unraisablehook"), "<hook>".__self__) is True:  # type: ignore[attr-defined]
                    # no handler of the cell's is set, nor its unraisable hook: no code of its runs from here on
                    "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                        "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
                    "<gc_off>".__self__()  # type: ignore[attr-defined]
                    sent = _record_write(ctx, rec, steps["total"])
                    if "<le>".__self__("<before>".__self__, "<fn>".__self__(  # type: ignore[attr-defined]
                            "<fence>".__self__, "<dict>".__self__(  # type: ignore[attr-defined]
                                "<globals>".__self__, __builtins__="<dict>".__self__("<builtins>".__self__)))(  # type: ignore[attr-defined]
                            "<space>".__self__, "<modules>".__self__, "<module>".__self__)) is True:  # type: ignore[attr-defined]
                        # sealed: the cell raised (SEAL_RAISED, 2); the parent ends this process
                        try:
                            "<write>".__self__("<done>".__self__, b"d")  # type: ignore[attr-defined]
                        except OSError:
                            pass
                        while True:
                            "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), 0,  # type: ignore[attr-defined]
                                "<pipe>".__self__()[0], 0, 1, 2, "<copy>".__self__(  # type: ignore[attr-defined]
                                    "<u64>".__self__, "<to>".__self__("<int>".__self__(  # type: ignore[attr-defined]
                                        "<hash>".__self__(sent, digest_size=8).digest(),  # type: ignore[attr-defined]
                                        "little"), 8, "<order>".__self__)),  # type: ignore[attr-defined]
                                "<copy>".__self__("<u64>".__self__, "<mark>".__self__))  # type: ignore[attr-defined]
                    break
            else:  # (tries ran out: a handler of the cell's still set; CRANE's bytes never written)
                "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
        except BaseException:  # noqa: BLE001 - a handler of the cell's raised between the passes' `try`s
            "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
    else:
        rec = _cell_record(ctx, None, source, seen, t_cell)
        _after_cell(ctx, portable)
        rec = _final_record(ctx, portable, rec, facts)
        try:  # (tries run out, or a handler of the cell's raised between the passes' own `try`s: `_TAMPERED`)
            for _ in "<tries>".__self__:  # type: ignore[attr-defined]  # (passes until one ran no code of the cell's: run._quiet_constants)
                try:
                    "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                        "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
                    "<setitem>".__self__("<sysdict>".__self__, "unraisablehook", "<hook>".__self__)  # type: ignore[attr-defined]
                    for s in "<signals>".__self__:  # type: ignore[attr-defined]
                        if "<callable>".__self__("<getsignal>".__self__(s)):  # type: ignore[attr-defined]
                            "<signal>".__self__(s, "<ign>".__self__)  # type: ignore[attr-defined]
                except BaseException:  # noqa: BLE001, S110 - a handler of the cell's ran (and raised): checked below
                    pass
                if "<any>".__self__("<map>".__self__("<callable>".__self__, "<map>".__self__(  # type: ignore[attr-defined]
                        "<getsignal>".__self__, "<signals>".__self__))) is False and "<is>".__self__(  # type: ignore[attr-defined]
                        "<get>".__self__("<sysdict>".__self__, "unraisablehook"), "<hook>".__self__) is True:  # type: ignore[attr-defined]
                    # no handler of the cell's is set, nor its unraisable hook: no code of its runs from here on
                    "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__),  # type: ignore[attr-defined]
                        "<nr_mask>".__self__, 0, "<byref>".__self__("<copy>".__self__("<u64>".__self__, "<all>".__self__)), 0, 8)  # type: ignore[attr-defined]
                    "<gc_off>".__self__()  # type: ignore[attr-defined]
                    sent = _record_write(ctx, rec, steps["total"])
                    if "<le>".__self__("<before>".__self__, "<fn>".__self__(  # type: ignore[attr-defined]
                            "<fence>".__self__, "<dict>".__self__(  # type: ignore[attr-defined]
                                "<globals>".__self__, __builtins__="<dict>".__self__("<builtins>".__self__)))(  # type: ignore[attr-defined]
                            "<space>".__self__, "<modules>".__self__, "<module>".__self__)) is True:  # type: ignore[attr-defined]
                        # sealed: the cell ended clean (SEAL_CLEAN, 1); the parent ends this process
                        try:
                            "<write>".__self__("<done>".__self__, b"d")  # type: ignore[attr-defined]
                        except OSError:
                            pass
                        while True:
                            "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), 0,  # type: ignore[attr-defined]
                                "<pipe>".__self__()[0], 0, 1, 1, "<copy>".__self__(  # type: ignore[attr-defined]
                                    "<u64>".__self__, "<to>".__self__("<int>".__self__(  # type: ignore[attr-defined]
                                        "<hash>".__self__(sent, digest_size=8).digest(),  # type: ignore[attr-defined]
                                        "little"), 8, "<order>".__self__)),  # type: ignore[attr-defined]
                                "<copy>".__self__("<u64>".__self__, "<mark>".__self__))  # type: ignore[attr-defined]
                    break
            else:  # (tries ran out: a handler of the cell's still set; CRANE's bytes never written)
                "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
        except BaseException:  # noqa: BLE001 - a handler of the cell's raised between the passes' `try`s
            "<end>".__self__("<tampered>".__self__)  # type: ignore[attr-defined]
    # CRANE's code or what it calls was rebound: sealed so (SEAL_TAMPERED, 4; its digest names nothing)
    try:
        "<write>".__self__("<done>".__self__, b"d")  # type: ignore[attr-defined]
    except OSError:
        pass
    while True:
        "<call>".__self__("<new>".__self__("<sealer>".__self__, "<sc>".__self__), 0,  # type: ignore[attr-defined]
                          "<pipe>".__self__()[0], 0, 1, 4, 0,  # type: ignore[attr-defined]
                          "<copy>".__self__("<u64>".__self__, "<mark>".__self__))  # type: ignore[attr-defined]


def _after_cell(ctx: _Ctx, portable: Any) -> None:
    """Right after the cell's record is made: the call guard off; a sealed run also stops the cell's timer, hooks,
    signal handlers and the garbage collector's runs (kernel/run._epilogue_begins), elsewhere its timer only."""
    if portable is not None:
        try:
            guard_off(portable)
        except BaseException:  # noqa: BLE001 - (the record still comes; the seal says how the cell ended)
            pass
    if ctx.args.get("sealed"):
        _epilogue_begins(ctx, portable.guard.tool if portable is not None else None)
    elif hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def _final_record(ctx: _Ctx, portable: Any, rec: dict, facts: dict) -> dict:
    """The run's record as it is written (kernel/run._record_write): the portable sandbox's report of it, no process
    of the run left, and a name of the kernel's the cell reached indirectly made `unavailable`."""
    source = ctx.args["source"]
    if portable is not None:
        rec = finish_portable(portable, source, rec)
        try:  # (before the record: no process of the run is left when the verdict arrives)
            end_descendants()
        except BaseException:  # noqa: BLE001 - the cell's own signal handler: their parent-death signal ends them
            pass
    fin = finalizers_missed() if rec.get("verdict") == "no-crash" else None
    if fin:  # the cell freed an object whose kernel finalizer the copy did not run (worker/finalizers.py)
        ctx.confinement["finalizers_missed"] = fin  # (the record's `confinement`: kernel/run._record_write)
    missing = rec.get("evalue") or ""
    if rec.get("ename") == "NameError" and any(f"'{n}'" in missing for n in set(facts.get("names") or ()) - set(
            ctx.shell.user_ns)):  # the cell reached a kernel name indirectly (eval, globals()): not copied
        rec = {"verdict": "unavailable", "reason": f"the cell reads a name of the kernel it does not name ({missing}): "
                                                  "it was not copied"}
    return rec

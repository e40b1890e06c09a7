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
    _SEALED,
    _TAMPERED,
    _channel_digest,
    _Ctx,
    _fence,
    _real_exit,
    _sent,
    _track_channel,
    _write_json,
)
from crane.sandbox.kernel.isolation import _POOLS, _prepare_child  # kernel: strip
from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.miniature import _REGISTRY  # kernel: strip
from crane.sandbox.kernel.request import check_request  # kernel: strip
from crane.sandbox.kernel.run import (  # kernel: strip
    _cell_begins,
    _cell_record,
    _epilogue_begins,
    _exec_plan,
    _record,
)
from crane.sandbox.kernel.session import _bind_hooks, _CommandLines, evaluate, run_command  # kernel: strip
from crane.sandbox.shared.carry import apply_carried  # kernel: strip
from crane.sandbox.shared.keras_graph import KERAS_KEY, apply_keras  # kernel: strip
from crane.sandbox.shared.seal import SEAL_CLEAN, SEAL_MAGIC, _seal_parts, wait_sealed  # kernel: strip
from crane.sandbox.worker.arrow import guard_arrow  # kernel: strip
from crane.sandbox.worker.devices import map_devices  # kernel: strip
from crane.sandbox.worker.frames import refuse_frame_reads  # kernel: strip
from crane.sandbox.worker.head import answer_self, fork_refused, serve_forked  # kernel: strip
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


def _sealed_commands(fd: int, buf: bytes) -> Generator[bytes, tuple[int, bytes], None]:
    """A session's command lines from `fd` (after `buf`), each wait for the next one made in CRANE's sealed read
    (shared/seal: the mark, the code the session sends in with its reply — SEAL_CLEAN, or SEAL_RAISED where the
    command's code raised — and the digest of every byte CRANE wrote on the channel since the last command): the
    daemon takes a reply only when it sees this worker waiting sealed over exactly the bytes it read, and one that
    says it ran clean only under the clean code (crane.sandbox.transplant_session). No function of the standard
    library makes this call: the session's code, which runs in this process, cannot wait sealed over a reply of its
    own making (ctypes can: docs/sandbox.md)."""
    import ctypes
    import errno
    fn, _, _ = _seal_parts(pipe=False)
    space = ctypes.create_string_buffer(1 << 16)
    code, sent = SEAL_CLEAN, _sent()  # (before the first command: CRANE's ready line)
    out = _SEALED["fd"]  # the reply channel, as made before any command ran
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                # the session sends in the code and what `_write_json` returned for its reply: the seal names CRANE's
                # reply whatever the command's code did to `_SEALED` (kernel/common)
                code, sent = yield line
        digest = _channel_digest(sent)
        got = fn(0, fd, space, 1 << 16, code, digest, SEAL_MAGIC)
        if got < 0:
            if ctypes.get_errno() == errno.EINTR:
                continue
            return
        if got == 0:
            return
        _track_channel(out)  # the next reply's bytes are counted afresh
        buf += space.raw[:got]


def _import(names: Iterable[str], only_library: bool) -> None:
    import importlib
    import importlib.util
    for name in names:
        if name in sys.modules:
            continue
        if only_library:
            try:
                spec = importlib.util.find_spec(name)
            except Exception:
                continue
            if spec is None or not is_library(spec.origin or (list(spec.submodule_search_locations or [""])[0])):
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
    return InteractiveShell.instance(config=c)


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
    names the cell binds, as in the kernel), adding the globals it brought that the namespace lacks."""
    if isinstance(obj, types.FunctionType) and obj.__module__ == "__main__" and obj.__globals__ is not ns:
        for k, v in obj.__globals__.items():
            if k not in ns and not k.startswith("__"):
                ns[k] = v
        f = types.FunctionType(obj.__code__, ns, obj.__name__, obj.__defaults__, obj.__closure__)
        f.__kwdefaults__, f.__qualname__, f.__doc__ = obj.__kwdefaults__, obj.__qualname__, obj.__doc__
        f.__dict__.update(obj.__dict__)
        f.__module__ = "__main__"
        try:
            f.__annotations__ = obj.__annotations__
        except Exception:
            pass
        return f
    if isinstance(obj, type) and obj.__module__ == "__main__":
        for k, v in list(vars(obj).items()):
            if isinstance(v, types.FunctionType):
                new = _rebind(v, ns)
            elif isinstance(v, (staticmethod, classmethod)) and isinstance(v.__func__, types.FunctionType):
                new = type(v)(_rebind(v.__func__, ns))
            else:
                continue
            try:
                setattr(obj, k, new)
            except Exception:
                pass
    return obj


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


def _apply_settings(facts: dict) -> None:
    """The kernel's interpreter and library settings a fresh interpreter lacks (kernel/export `_settings`): each
    library's through shared/carry.py (applied, then read back and compared: what differs is `settings_missed`,
    and a crash that rests on it is only "likely"), torch's here."""
    st = facts.get("settings") or {}
    _W["settings_missed"].extend(apply_carried(st))
    ts = st.get("torch")
    torch = sys.modules.get("torch")
    if ts and torch is not None:
        try:
            torch.set_default_dtype(getattr(torch, str(ts["default_dtype"]).rpartition(".")[2]))
            torch.set_grad_enabled(bool(ts["grad_enabled"]))
            torch.use_deterministic_algorithms(bool(ts["deterministic"]), warn_only=bool(ts["deterministic_warn_only"]))
            torch.autograd.set_detect_anomaly(bool(ts["anomaly"]))
            torch.set_float32_matmul_precision(str(ts["matmul_precision"]))
            if ts.get("rng"):
                torch.random.set_rng_state(torch.tensor(list(bytes.fromhex(ts["rng"])), dtype=torch.uint8))
        except Exception:
            _W["settings_missed"].append("torch")  # a crash in torch then stays "likely" (transplant.crash_certain)


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
    import pickle
    args = check_request(dict(spec["args"]))
    d = args["dir"]
    with open(os.path.join(d, "env.json")) as f:
        facts = json.load(f)
    _enter_environment(facts, shell)
    _POOLS["key"] = None
    portable = None  # -- portable sandbox (worker/portable.py): the call guard and the audit hook, no OS part
    if args.get("confinement") in ("portable", "guard"):
        ctx, portable = prepare_portable(args, shell, lines.out)  # commands on stdin, replies on stdout
        commands: Generator[bytes, Any, None] = lines.commands()
    else:  # -- end portable
        lines.close()
        why = _unconfinable(sys.platform)
        if why:
            fd = os.open(os.path.join(d, "result"), os.O_WRONLY)
            _write_json(fd, {"event": "error", "reason": why})
            os.close(fd)
            return
        ctx = _prepare_child(args, shell, os.getppid(), False)  # confined from here on (blocking: no processes)
        commands = _session_lines(ctx.cmd_fd)
    if sys.platform.startswith("linux"):  # each reply sealed: the daemon reads the seal in /proc (issue 41)
        _track_channel(ctx.result_fd)
        commands = _sealed_commands(ctx.cmd_fd, b"") if portable is None else _sealed_commands(lines.fd, lines.buf)
        _bind_hooks()  # (a command's hooks stop before its reply is made: kernel/session._hooks_off)
    _kernel_environment(facts)  # the kernel's environment, once confined (worker_env: an allowlist before)
    fence, send, end = _fence, _write_json, _real_exit()  # bound before any command's code runs
    audit = ctx.audit_state
    ns = shell.user_ns
    state: dict = {"imported": False, "mapped": False}
    out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
    _write_json(ctx.result_fd, {"event": "ready", "pid": os.getpid(), "depth": 0, "confinement": ctx.confinement})
    raised = False  # whether the command's code raised: said by where it ended, sealed with its reply
    line = next(commands, None)
    while line is not None:
        raised = False
        try:
            cmd = json.loads(line)
        except ValueError:
            cmd = None
        op = cmd.get("op") if type(cmd) is dict else None
        reply: dict = {"event": "error", "reason": "bad command"}
        if type(cmd) is dict:
            reply = {"event": "reply", "id": cmd.get("id"), "key": cmd.get("key"), "pid": os.getpid(), "depth": 0}
        if type(cmd) is not dict:
            pass
        elif op == "load":
            if portable is not None:
                lift_limits(portable)  # (the next run's limit counts what this load adds)
            audit["bypass"] = True  # loading the kernel's state is not the session's code
            try:
                if not state["imported"]:
                    _import(facts.get("modules") or [], only_library=False)
                    state["imported"] = True
                with open(os.path.join(d, str(cmd["state"])), "rb") as f:
                    data = f.read()
                bufs = _load_buffers(d, [str(b) for b in cmd.get("buffers") or []])
                loaded = pickle.loads(data, buffers=bufs)
                _register_accessors(loaded.pop("\x00crane-accessors", None))
                if not state.get("settings"):
                    _apply_settings(facts)
                    state["settings"] = True
                _W["settings_missed"].extend(apply_keras(loaded.pop(KERAS_KEY, None)))  # Keras graphs built whole
                for name, obj in loaded.items():
                    if name not in ns:
                        ns[name] = _rebind(obj, ns)
                if not state["mapped"]:
                    state["mapped"] = _map_devices(facts.get("torch") or {}, bool(spec.get("map_devices")))
                reply["ok"] = True
            except BaseException as exc:  # noqa: BLE001 - the session's next run is then unavailable
                reply.update({"ok": False, "reason": f"the kernel's state could not be loaded in a separate "
                                                     f"process: {type(exc).__name__}: {exc}"})
            finally:
                audit["bypass"] = False
        elif op == "run":
            if portable is not None:  # the run's resource limits (worker/limits.py), from what the worker holds now
                apply_limits(portable, args, float(cmd.get("budget_s", 10.0)))
            before = fence()
            with guarded(portable):
                rec, raised = run_command(ctx, cmd, out_path, err_path)
            reply.update(rec)
            if not before <= fence():  # (frozen pairs: kernel/common._fence)
                end(_TAMPERED)  # it rebound CRANE's own code: no reply at all (the daemon restores the session)
        elif op == "eval":  # (the portable sandbox vets the expression's calls too)
            before = fence()
            rec, raised = evaluate(ctx, cmd, lambda: guarded(portable))
            reply.update(rec)
            if not before <= fence():  # (frozen pairs: kernel/common._fence)
                end(_TAMPERED)
        elif op == "close":
            os._exit(12)
        else:
            reply.update({"ok": False, "reason": f"unknown op {op!r} (a transplant session's checkpoints are the "
                                                 "daemon's)"})
        audit["bypass"] = True
        sent = send(ctx.result_fd, reply)
        audit["bypass"] = False
        try:
            line = commands.send((2 if raised else 1, sent))  # (SEAL_RAISED / SEAL_CLEAN as literals: kernel/run)
        except StopIteration:
            line = None


def _guard_arrow(run: Any) -> list[str]:
    def refuse(what: str, path: Any) -> None:
        run.refuse(what, "call guard", path)
    return guard_arrow(run.folder.inside, run._prepare_write, refuse, run.ctx.scratch)


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
        import pickle
        with open(os.path.join(d, "state.pkl"), "rb") as f:
            data = f.read()
        state = pickle.loads(data, buffers=_load_buffers(d, int(facts.get("buffers") or 0)))
        known = state.pop("\x00crane-shrunk", None) or []
        _register_accessors(state.pop("\x00crane-accessors", None))
        _apply_settings(facts)
        _W["settings_missed"].extend(apply_keras(state.pop(KERAS_KEY, None)))  # Keras graphs built whole
        ns = shell.user_ns
        for name, obj in state.items():
            ns[name] = _rebind(obj, ns)
        _register_shrunk(known, ns)
        mapped = _map_devices(facts.get("torch") or {}, bool(spec.get("map_devices")))
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
    fence, end = _fence, _real_exit()  # bound before the cell runs (kernel/common: no record once it rebinds them)
    before = fence()
    sealed = bool(args.get("sealed"))
    source, ns = args["source"], shell.user_ns
    seen: dict = {}
    if portable is not None:
        begin_portable(portable)
    t_cell = time.perf_counter()
    # how the cell ended is said by where the seal is made (one place for a raise, one for a clean end, the code a
    # constant at each), never by a value the cell could change: kernel/run._child_run, the fork path's twin
    try:
        with shell.builtin_trap:
            _exec_plan(ctx, _cell_begins(ctx, source, seen), ns)
    except BaseException as e:  # noqa: BLE001 - the cell's own exception, SystemExit included
        rec = _cell_record(ctx, e, source, seen, t_cell)  # (the guard still on: the exception's text is the cell's)
        _after_cell(ctx, portable)
        digest = _finish(ctx, portable, rec, steps, facts, before, fence, end)
        if not sealed:
            return
        wait_sealed(2, digest, ctx.done_fd)  # sealed: the cell raised (SEAL_RAISED, a literal: kernel/run)
    rec = _cell_record(ctx, None, source, seen, t_cell)
    _after_cell(ctx, portable)
    digest = _finish(ctx, portable, rec, steps, facts, before, fence, end)
    if not sealed:
        return
    wait_sealed(1, digest, ctx.done_fd)  # sealed: the cell ended clean (SEAL_CLEAN, a literal)


def _after_cell(ctx: _Ctx, portable: Any) -> None:
    """Right after the cell's record is made: the call guard off; a sealed run also stops the cell's timer, hooks,
    signal handlers and the garbage collector's runs (kernel/run._epilogue_begins), elsewhere its timer only."""
    if portable is not None:
        try:
            guard_off(portable)
        except BaseException:  # noqa: BLE001 - (the record still comes; the seal says how the cell ended)
            pass
    if ctx.args.get("sealed"):
        _epilogue_begins(ctx)
    elif hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def _finish(ctx: _Ctx, portable: Any, rec: dict, steps: dict, facts: dict, before: frozenset, fence: Any,
            end: Any) -> int:
    """The run's record, written and its channel closed (kernel/run._record, the forked child's epilogue): the
    digest of every byte CRANE wrote there. A cell that rebound CRANE's code gets no record (sealed as such, or,
    with no parent reading a seal, an exit with code 87)."""
    source = ctx.args["source"]
    if portable is not None:
        rec = finish_portable(portable, source, rec)
        try:  # (before the record: no process of the run is left when the verdict arrives)
            end_descendants()
        except BaseException:  # noqa: BLE001 - the cell's own signal handler: their parent-death signal ends them
            pass
    missing = rec.get("evalue") or ""
    if rec.get("ename") == "NameError" and any(f"'{n}'" in missing for n in set(facts.get("names") or ()) - set(
            ctx.shell.user_ns)):  # the cell reached a kernel name indirectly (eval, globals()): not copied
        rec = {"verdict": "unavailable", "reason": f"the cell reads a name of the kernel it does not name ({missing}): "
                                                  "it was not copied"}
    return _record(ctx, rec, steps["total"], before, fence, bool(ctx.args.get("sealed")), end)

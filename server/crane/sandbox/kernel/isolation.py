"""Fork sandbox, kernel side: cutting the child's ties to the kernel and confining it.

Before any user code the child gets its own process group and a parent-death signal; every inherited
descriptor and every shared writable mapping is made private (kernel/fds.py, kernel/mappings.py); fd 1/2,
`sys.stdout`/`sys.stderr`, the display hook and publisher are replaced by capture; ipykernel's output streams
and session sends are neutralised; thread pools run single-threaded. Then the mode is chosen: "layered" (the
child moves into its own namespaces with private copy-on-write layers, kernel/layer.py) unless the daemon asked
for "blocking" or the layer cannot be built here (the reason is reported), then `confine()` (kernel/confine.py) with
the matching profile and the audit hook (kernel/audit.py). A setup line on the result channel says what is in
force.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from crane.sandbox.kernel.armed import keep_alarm_handler  # kernel: strip
from crane.sandbox.kernel.atfork import resume_in_sandbox  # kernel: strip
from crane.sandbox.kernel.audit import _install_audit_hook  # kernel: strip
from crane.sandbox.kernel.common import (  # kernel: strip
    _SETUP,
    SandboxBlocked,
    _Capture,
    _Ctx,
    _summarise_data,
    _track_channel,
    _write_json,
    proc_kb,
)
from crane.sandbox.kernel.confine import confine, set_parent_death_signal  # kernel: strip
from crane.sandbox.kernel.fds import privatise_descriptors, reopen_through_mounts  # kernel: strip
from crane.sandbox.kernel.fork_threads import _FT_LIVE  # kernel: strip
from crane.sandbox.kernel.layer import (  # kernel: strip
    LayerError,
    build_layer,
    clone_into_namespaces,
    listening_unix_sockets,
    supervise,
    writable_places,
    write_id_maps,
)
from crane.sandbox.kernel.mappings import privatise_shared_mappings  # kernel: strip
from crane.sandbox.kernel.miniature import cell_names, shrink_namespace  # kernel: strip

_PUBLISHER: dict = {}  # the child's capturing display publisher (never built in the kernel process)


def publisher_class() -> Any:
    """In the kernel (cached) or the child: the capturing DisplayPublisher class. Making the class registers
    nothing; only an instance would (IPython 9), and the instance is made in the child only."""
    cls = _PUBLISHER.get("cls")
    if cls is None:
        from IPython.core.displaypub import DisplayPublisher

        class CapturePublisher(DisplayPublisher):
            sink: list = []

            def publish(self, data: Any, metadata: Any = None, source: Any = None, *, transient: Any = None,
                        update: bool = False, **kw: Any) -> None:
                if len(self.sink) < 50:
                    self.sink.append(_summarise_data(data, "display_data"))

            def clear_output(self, wait: bool = False) -> None:
                pass

        cls = _PUBLISHER["cls"] = CapturePublisher
    return cls


def _capture_publisher(shell: Any) -> Any:
    """In the child only: the capturing publisher instance."""
    pub = _PUBLISHER.get("pub")
    if pub is None:
        pub = _PUBLISHER["pub"] = publisher_class()(shell=shell)
    return pub


def _isolate_descriptors(ctx: _Ctx) -> None:
    """Make every inherited descriptor private (kernel/fds.py), then open our own: the result channel (the
    daemon's FIFO, or a file in the kernel-side directory when the daemon cannot see this machine), the
    session's command FIFO, stdout/stderr capture; fd 0 reads /dev/null."""
    done = int(ctx.args.get("done_fd", -1))  # (one-shot runs: the pipe to the reaper, kernel/entry._fork)
    ctx.fds = privatise_descriptors(keep=(done,) if done >= 0 else ())
    priv = ctx.args["dir"]
    if ctx.args["channel"] == "remote":
        res = os.open(os.path.join(priv, "result"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    else:
        res = os.open(os.path.join(priv, "result"), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(res, True)
    ctx.result_fd = res
    _SETUP["result_fd"] = res
    if ctx.args["mode"] == "run":
        _track_channel(res)  # what CRANE writes there is what the seal names (kernel/common)
        ctx.done_fd = int(ctx.args.get("done_fd", -1))  # to the kernel's reaper, which checks the seal
    if ctx.args["mode"] == "session":
        cmd = os.open(os.path.join(priv, "commands"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(cmd, True)
        ctx.cmd_fd = cmd
    # a run's are the daemon's FIFOs, drained as they fill (channel.CaptureDrain: the output limit holds for
    # every process and C code); a session's and the remote channel's are files
    capture_std_streams(ctx, priv, truncate=True)


def capture_std_streams(ctx: _Ctx, priv: str, truncate: bool) -> None:
    """fd 0 from the null device, fd 1/2 into `priv`'s `stdout`/`stderr` (emptied first when `truncate`; writes
    blocking), and the capped `_Capture` streams over them (`output_limit`). Written for any platform: the
    portable worker uses it too (no O_NONBLOCK or `set_blocking` where the platform has none)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NONBLOCK", 0) | (os.O_TRUNC if truncate else 0)
    out = os.open(os.path.join(priv, "stdout"), flags, 0o600)
    err = os.open(os.path.join(priv, "stderr"), flags, 0o600)
    for fd in (out, err):
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (devnull, out, err):
        os.close(fd)
    limit = ctx.args["output_limit"]
    ctx.stdout = _Capture(1, "stdout", limit)  # (the names and encoding ipykernel's OutStream gives a cell)
    ctx.stderr = _Capture(2, "stderr", limit)


def _neutralise_kernel_io(ctx: _Ctx) -> None:
    """Nothing the child does may reach the kernel's iopub: replace streams, display hook and publisher, and
    make ipykernel's own stream/session objects write into the capture (or nowhere)."""
    sys.stdout, sys.stderr = ctx.stdout, ctx.stderr
    out, err = ctx.stdout, ctx.stderr
    if out is None or err is None:  # set by _isolate_descriptors, which runs first
        raise RuntimeError("the child's output is not captured")

    def _dh(value: Any) -> None:
        if value is None:
            return
        try:
            import builtins
            builtins._ = value  # type: ignore[attr-defined]  # IPython's displayhook sets it too
        except Exception:
            pass
        _record_display(ctx, value, "execute_result")

    sys.displayhook = _dh
    ctx.displayhook = _dh
    ios = sys.modules.get("ipykernel.iostream")
    if ios is not None:
        try:
            ios.OutStream.write = lambda self, s: (err if getattr(self, "name", "") == "stderr" else out).write(s)
            ios.OutStream.flush = lambda self: None
            ios.OutStream.writelines = lambda self, seq: [self.write(s) for s in seq] and None
            ios.IOPubThread.send_multipart = lambda self, *a, **k: None
            ios.BackgroundSocket.send_multipart = lambda self, *a, **k: None
        except Exception:
            pass
    sess = sys.modules.get("jupyter_client.session")
    if sess is not None:
        try:
            sess.Session.send = lambda self, *a, **k: None
        except Exception:
            pass
    shell = ctx.shell
    try:  # built here, in the child: IPython 9's DisplayPublisher registers callbacks on the shell's events
        pub = _capture_publisher(shell)
    except Exception:
        pub = None
    if pub is not None:
        pub.sink = ctx.displays
        shell.display_pub = pub
    def _shown(*a: Any, **k: Any) -> None:  # a magic (e.g. %%time) caught the exception and shows it: still an error output
        if ctx.shown_exc is None:
            ctx.shown_exc = sys.exc_info()[1]

    def _no_input(*a: Any, **k: Any) -> NoReturn:  # the real run would wait for the user to type: not something a sandbox can decide
        msg = "crane sandbox: the cell asks for the user's input (input/getpass), which a sandboxed run cannot give"
        ctx.denied.append(msg)
        raise SandboxBlocked(errno.EPERM, msg)

    try:
        import builtins
        import getpass
        builtins.input = _no_input
        getpass.getpass = _no_input
        if shell is not None and hasattr(shell, "raw_input"):
            shell.raw_input = _no_input
    except Exception:
        pass
    for attr in ("showtraceback", "showsyntaxerror", "showindentationerror"):
        try:
            setattr(shell, attr, _shown)
        except Exception:
            pass
    try:
        import asyncio.events as _ev
        _ev._set_running_loop(None)  # the kernel's loop is "running" in this stack; it is not ours
    except Exception:
        pass


def _record_display(ctx: _Ctx, value: Any, kind: str) -> None:
    if len(ctx.displays) >= 50:
        return
    try:
        # the cell's last value is formatted as IPython's display hook formats it: every enabled formatter, not
        # text/plain alone (round 12, h7: a `_repr_html_`/`_repr_latex_` that raises is the cell's error in the
        # kernel — ipykernel marks the request failed for a traceback shown while the display hook runs — and was
        # `no-crash` here); a formatter's exception goes to `showtraceback` (`_shown`), as any magic's
        data, _md = ctx.shell.display_formatter.format(value)
    except Exception:
        try:
            data = {"text/plain": repr(value)}
        except Exception as exc:
            data = {"text/plain": f"<repr failed: {type(exc).__name__}>"}
    ctx.displays.append(_summarise_data(data, kind))


_POOLS: dict = {"key": None, "calls": []}  # the thread-pool setters of the loaded OpenMP/BLAS libraries
_POOL_SETTERS = ("omp_set_num_threads", "openblas_set_num_threads", "openblas_set_num_threads64_",
                 "scipy_openblas_set_num_threads64_", "MKL_Set_Num_Threads", "bli_thread_set_num_threads",
                 "blas_thread_shutdown_")


def find_thread_pools() -> None:
    """In the kernel, before forking: find the OpenMP/BLAS thread-pool setters of the loaded libraries (a walk
    of the loaded objects, redone only when the kernel imported something since), so the child only calls
    them."""
    import ctypes
    key = len(sys.modules)
    if _POOLS["key"] == key:
        return
    paths = []

    class _Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

    def visit(info: Any, size: int, data: Any) -> int:
        name = info.contents.name
        if name:
            base = name.rsplit(b"/", 1)[-1].lower()
            if b"gomp" in base or b"iomp" in base or b"openblas" in base or b"mkl_rt" in base or b"blis" in base:
                paths.append(name.decode("utf-8", "replace"))
        return 0

    calls = []
    try:
        cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Info), ctypes.c_size_t, ctypes.c_void_p)(visit)
        ctypes.CDLL(None).dl_iterate_phdr(cb, None)
        for p in paths:
            try:
                lib = ctypes.CDLL(p, mode=os.RTLD_NOLOAD)
            except OSError:
                continue
            calls += [(n, getattr(lib, n)) for n in _POOL_SETTERS if getattr(lib, n, None) is not None]
    except Exception:
        calls = []
    _POOLS["key"], _POOLS["calls"] = key, calls


def native_threads() -> tuple[dict, int]:
    """In the kernel: its threads by name (comm), and how many of those named like the process itself Python
    did not start (OpenMP, BLAS, torch or unnamed rayon workers; ipykernel's own threads are Python threads,
    ZeroMQ's are named ZMQbg/...)."""
    import threading
    names: dict = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    n = f.read().strip()
            except OSError:
                continue
            names[n] = names.get(n, 0) + 1
        with open("/proc/self/comm") as f:
            own = f.read().strip()
    except OSError:
        return names, 0
    return names, max(0, names.get(own, 0) - threading.active_count())


# Thread pools that neither survive fork nor can be made single-threaded in the child once they have run: a
# forked child hangs (polars' rayon pool) or crashes (LightGBM's OpenMP team) in its next parallel call.
_UNSAFE_POOLS = (("polars", "polars' thread pool (rayon)"), ("lightgbm", "LightGBM's OpenMP thread pool"))


def _touches(lib: str, source: str, ns: Any) -> bool:
    """Whether the cell names the library or reads a name bound to one of its objects (or to the module). Reads
    only exact types and plain dicts: no user code runs. A library reached only through a function the cell
    calls is not seen (that run may then sit to its budget: a timeout, never a wrong verdict)."""
    import re
    import types
    if lib in source:
        return True
    for name in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source)):
        obj = ns.get(name) if type(ns) is dict else None
        if obj is None:
            continue
        t = type(obj)
        try:
            if t is types.ModuleType:
                mod = object.__getattribute__(obj, "__dict__").get("__name__", "")
            else:
                mod = type.__getattribute__(t, "__module__")
        except Exception:
            continue
        if isinstance(mod, str) and (mod == lib or mod.startswith(lib + ".")):
            return True
    return False


def unsafe_pools(source: str = "", ns: Any = None) -> str | None:
    """In the kernel, before forking: why a thread pool that has already run would hang or crash this cell in a
    forked copy, or None. A pool has run when its threads exist (polars names them polars-N; LightGBM's OpenMP
    workers are native threads Python did not start)."""
    names, extra = native_threads()
    _POOLS["native"] = extra
    running = {"polars": any(n.startswith("polars-") for n in names), "lightgbm": extra > 0}
    for lib, what in _UNSAFE_POOLS:
        if running[lib] and lib in sys.modules and _touches(lib, source, ns if ns is not None else {}):
            return f"{what} has run in the kernel: a forked copy would hang or crash in its next parallel call"
    return None


def _single_thread_pools() -> None:
    """OpenMP/BLAS pools of the kernel do not exist in the child (a GNU OpenMP region would hang there);
    run them single-threaded, which also keeps the user's kernel responsive on a small machine. Then OpenBLAS's
    (re-created) workers are joined: a single-threaded process can also be checkpointed (forked again)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(1)
        except Exception:
            pass
    if _POOLS["key"] is None:  # not looked up in the kernel (a session's checkpoint): look now
        find_thread_pools()
    for name, fn in _POOLS["calls"]:
        try:
            fn() if name == "blas_thread_shutdown_" else fn(1)
        except Exception:
            pass


def _memory_budget_mb(requested: int) -> int:
    avail = proc_kb("/proc/meminfo", ("MemAvailable",)).get("MemAvailable")
    return requested if avail is None else max(64, min(requested, avail // 1024 // 2))


def _machine_memory_bytes(portable: bool = False) -> int:
    """The memory the machine can commit to one allocation, in bytes (0: unknown): an allocation larger than it
    fails in the kernel too. The OS sandbox reads /proc/meminfo (MemTotal + SwapTotal); the portable sandbox's
    worker (`portable`, any platform, run in the kernel's interpreter: the stdlib only) asks the platform."""
    if portable:
        return _portable_memory_bytes()
    return sum(proc_kb("/proc/meminfo", ("MemTotal", "SwapTotal")).values()) * 1024


def _portable_memory_bytes() -> int:
    """The stdlib's answer, per platform, without /proc: Linux's sysinfo(2) (memory plus swap); Windows'
    GlobalMemoryStatusEx (its commit limit: memory plus page file); elsewhere on POSIX the physical memory
    (`os.sysconf`); 0 on macOS, whose swap grows on demand (an allocation past its memory may succeed)."""
    import ctypes

    if sys.platform == "darwin":
        return 0
    if sys.platform == "win32":
        class _MemoryStatus(ctypes.Structure):
            _fields_ = [("dwLength", ctypes.c_uint32), ("dwMemoryLoad", ctypes.c_uint32),
                        ("ullTotalPhys", ctypes.c_uint64), ("ullAvailPhys", ctypes.c_uint64),
                        ("ullTotalPageFile", ctypes.c_uint64), ("ullAvailPageFile", ctypes.c_uint64),
                        ("ullTotalVirtual", ctypes.c_uint64), ("ullAvailVirtual", ctypes.c_uint64),
                        ("ullAvailExtendedVirtual", ctypes.c_uint64)]

        st = _MemoryStatus()
        st.dwLength = ctypes.sizeof(_MemoryStatus)
        try:
            ok = ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st))  # type: ignore[attr-defined]
        except (AttributeError, OSError):
            return 0
        return int(st.ullTotalPageFile) if ok else 0
    if sys.platform.startswith("linux"):
        class _SysInfo(ctypes.Structure):  # struct sysinfo (linux/sysinfo.h), padded past its end
            _fields_ = [("uptime", ctypes.c_long), ("loads", ctypes.c_ulong * 3), ("totalram", ctypes.c_ulong),
                        ("freeram", ctypes.c_ulong), ("sharedram", ctypes.c_ulong), ("bufferram", ctypes.c_ulong),
                        ("totalswap", ctypes.c_ulong), ("freeswap", ctypes.c_ulong), ("procs", ctypes.c_ushort),
                        ("pad", ctypes.c_ushort), ("totalhigh", ctypes.c_ulong), ("freehigh", ctypes.c_ulong),
                        ("mem_unit", ctypes.c_uint), ("_f", ctypes.c_char * 64)]

        info = _SysInfo()
        try:
            if ctypes.CDLL(None, use_errno=True).sysinfo(ctypes.byref(info)) == 0:
                return (int(info.totalram) + int(info.totalswap)) * max(1, int(info.mem_unit))
        except (AttributeError, OSError):
            pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")


def _layer_budget_mb(requested: int) -> int:
    """The private layer's tmpfs: at most `requested`, and a quarter of the available memory."""
    return max(16, min(int(requested), _memory_budget_mb(1 << 30) // 2))


def _enter_layer(ctx: _Ctx) -> dict | None:
    """Layered mode (see kernel/layer.py). Returns the layer's description in B (the process that runs the cell),
    or None with `ctx.mode_reason` set when the blocking confinement must be used instead. In A (the process
    forked from the kernel) it never returns: A supervises B and exits."""
    cwd = os.getcwd()
    places = writable_places(cwd, ctx.args["places"])
    if not places:
        ctx.mode_reason = "no writable directory to give a private layer"
        return None
    sockets = listening_unix_sockets()  # read in A: B's network namespace will not list them
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()  # B -> A: B's record is out, A writes nothing more on the channel (it then ends)
    cpu_a = time.process_time()  # A's setup CPU so far (B's own starts at zero)
    import socket
    notify = hasattr(socket, "send_fds")  # Python >= 3.9: the listener of network attempts goes to A
    sock_a, sock_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) if notify else (None, None)
    t0 = time.perf_counter()
    try:
        pid = clone_into_namespaces()
    except LayerError as exc:
        for end in (sock_a, sock_b):
            if end is not None:
                end.close()
        for fd in (go_r, go_w, done_r, done_w):
            os.close(fd)
        ctx.mode_reason = f"namespaces unavailable ({exc.strerror or exc})"
        return None
    reaper_fd = ctx.done_fd  # the kernel's reaper checks A's end; A checks B's seal
    if pid == 0:  # B
        t1 = time.perf_counter()
        os.close(go_w)
        os.close(done_r)
        if reaper_fd >= 0:
            os.close(reaper_fd)
        ctx.done_fd = done_w
        if sock_a is not None:
            sock_a.close()
            ctx.notif_sock = sock_b
        set_parent_death_signal(signal.SIGKILL)
        try:
            os.setpgid(0, 0)  # a signal to "our process group" stays in the namespace
        except OSError:
            pass
        go = os.read(go_r, 1)
        os.close(go_r)
        if go != b"g":  # A is gone, or could not map our ids
            os._exit(0)
        t2 = time.perf_counter()
        try:
            info = build_layer(places, cwd, _layer_budget_mb(ctx.args["layer_mb"]) << 20,
                               ctx.args["max_processes"], sockets)
        except OSError as exc:
            ctx.mode_reason = f"the private layer could not be built ({exc})"
            return None
        own = {ctx.result_fd, ctx.cmd_fd}
        if ctx.notif_sock is not None:
            own.add(ctx.notif_sock.fileno())
        info["fds"] = reopen_through_mounts({fd for fd in own if fd is not None and fd >= 0})
        # capabilities: confine() drops them for every kernel, root included (seccomp.drop_capabilities)
        t3 = time.perf_counter()
        ctx.steps.update(clone=round((t1 - t0) * 1000, 3), id_maps=round((t2 - t1) * 1000, 3),
                         mounts=round((t3 - t2) * 1000, 3))
        ctx.cpu_before = cpu_a
        return info
    os.close(go_r)  # A
    os.close(done_w)
    if sock_b is not None:
        sock_b.close()
    try:
        write_id_maps(pid)
    except OSError as exc:
        os.close(go_w)
        if sock_a is not None:
            sock_a.close()
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        ctx.mode_reason = f"user namespace ids could not be mapped ({exc})"
        return None
    if reaper_fd >= 0:  # "L": the run's process is B, whose seal A checks (the reaper only waits for A)
        try:
            os.write(reaper_fd, b"L")
        except OSError:
            pass
        os.close(reaper_fd)
        ctx.done_fd = -1
    os.write(go_w, b"g")
    supervise(pid, float(ctx.args["budget_s"]) + 1.5, ctx.result_fd, sock_a, done_r,
              os.path.join(ctx.args["dir"], "status"))
    os._exit(0)


# library-global executors whose worker processes belong to the kernel: (module, globals that hold them)
_REUSABLE_EXECUTORS = (("joblib.externals.loky.reusable_executor", ("_executor", "_executor_kwargs")),
                       ("loky.reusable_executor", ("_executor", "_executor_kwargs")),
                       ("joblib.executor", ("_executor_args",)))


def _fresh_executors() -> None:
    """A reusable executor the kernel made earlier (joblib's loky pool: scikit-learn's n_jobs, Parallel) talks to
    the kernel's worker processes through pipes that are /dev/null here, so the cell would wait for ever: the
    copy forgets it, and the cell's first parallel call starts a pool of its own, as loky does after its workers
    died. The kernel's executor and workers are not touched."""
    for name, attrs in _REUSABLE_EXECUTORS:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for attr in attrs:
            if getattr(mod, attr, None) is not None:
                setattr(mod, attr, None)


def _channel_closer(fd: int, owner: int) -> Callable[[], None]:
    def close_in_child() -> None:
        if os.getpid() != owner:
            try:
                os.close(fd)
            except OSError:
                pass
    return close_in_child


def _network_watcher(args: dict) -> Any:
    """Blocking runs on the local channel: a connection to the daemon's notify socket (made before confinement,
    which refuses sockets), over which the seccomp listener goes; None where there is no daemon to answer."""
    path = args["notify"]
    if not path or args["channel"] == "remote" or args["mode"] != "run":
        return None
    import socket
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(2.0)
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _hand_over_listener(sock: Any, listener: int) -> None:
    """The network attempts of every thread and process of the run are answered (and recorded) by the one
    holding `sock`'s other end: A in layered mode, the daemon in blocking mode."""
    if sock is None:
        return
    try:
        if listener >= 0:
            import socket
            socket.send_fds(sock, [b"L"], [listener])
    finally:
        sock.close()
        if listener >= 0:
            os.close(listener)


def _oom_first() -> None:
    """The OOM killer's first choice, before anything else happens in the child: every process of the sandbox
    (B and worker processes inherit it) is killed before the user's kernel, whose pages it shares."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _parent_of(pid: int) -> int:
    """The parent of process `pid` (0 when unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _prepare_child(args: dict, shell: Any, parent: int, on_main: bool) -> _Ctx:
    """Everything before user code: isolation, capture, the mode's layer and confinement, the audit hook."""
    t0 = time.perf_counter()
    cpu0 = time.process_time()  # a forked child's CPU times start at zero
    try:
        os.setpgid(0, 0)  # the user's interrupt (sent to the kernel's process group) must not reach us
    except OSError:
        pass
    if on_main:
        set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)
    alarm = signal.getsignal(signal.SIGALRM)  # (the kernel's: a notebook's handler is kept, kernel/armed)
    for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    try:
        keep_alarm_handler(alarm)
    except (OSError, ValueError):  # (not the main thread: the default action, as before)
        pass
    ctx = _Ctx(args, shell)
    ctx.kernel_ppid = _parent_of(parent)  # read now: the namespaces entered below hide the kernel's /proc

    def step(name: str, since: float) -> float:
        now = time.perf_counter()
        ctx.steps[name] = round((now - since) * 1000.0, 3)
        return now

    _oom_first()
    t = step("start", t0)
    _isolate_descriptors(ctx)
    if args["mode"] == "session":  # made before confinement (which refuses socketpair): a command's own process
        import socket  # becomes the session's head by receiving the channel on it (kernel/session.py)
        ctx.handover = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    t = step("descriptors", t)
    _neutralise_kernel_io(ctx)
    sys.dont_write_bytecode = True
    _single_thread_pools()
    _fresh_executors()
    t = step("streams", t)
    ctx.mappings = privatise_shared_mappings()
    t = step("mappings", t)
    ctx.memory_mb = _memory_budget_mb(args["memory_mb"])
    budget = float(args["budget_s"])
    cpu = float(args["cpu_s"] if args["cpu_s"] is not None else budget + 1.0)
    layer = None
    if args["mode"] == "session":
        ctx.mode_reason = "sandbox sessions use the blocking confinement"
    elif args["layer"] == "blocking":
        ctx.mode_reason = "the blocking confinement was asked for"
    else:
        layer = _enter_layer(ctx)
    t = step("layer", t)
    if layer is not None:
        ctx.mode, ctx.layer, ctx.places = "layered", layer, list(layer["places"])
        for name in _THREAD_ENV:  # worker processes that exec a new interpreter start single-threaded too
            os.environ[name] = "1"
        layer_mb = _layer_budget_mb(args["layer_mb"])
        ptys = ["/dev/pts"] if layer.get("ptys") else []
        sock = ctx.notif_sock
        ctx.confinement = confine(
            notify_network=sock is not None,
            writable=ctx.places + ptys, cpu_s=cpu, memory_mb=ctx.memory_mb, file_mb=max(64, layer_mb), profile="layered",
            metadata_ok=bool(layer.get("readonly")),
            nproc=None if os.geteuid() == 0 else min(256, args["max_processes"]), vm_floor_mb=args["vm_floor_mb"],
        )
        # the seccomp listener goes to A, which answers and records network attempts
        _hand_over_listener(sock, ctx.confinement.pop("listener", -1))
    else:
        if ctx.notif_sock is not None:  # B fell back to the blocking confinement: no listener to hand over
            ctx.notif_sock.close()
            ctx.notif_sock = None
        os.environ["TMPDIR"] = ctx.scratch
        try:
            import tempfile
            tempfile.tempdir = ctx.scratch
        except Exception:
            pass
        watcher = _network_watcher(args)
        # fork_gate: set by kernel/session.py for its own checkpoint clones (not part of the request)
        ctx.confinement = confine(
            writable=[ctx.scratch], cpu_s=cpu, memory_mb=ctx.memory_mb, file_mb=args["file_mb"],
            profile="blocking", fork_gate=args.get("fork_gate"), notify_network=watcher is not None,
            vm_floor_mb=args["vm_floor_mb"],
        )
        _hand_over_listener(watcher, ctx.confinement.pop("listener", -1))
    t = step("confine", t)
    resume_in_sandbox()
    _install_audit_hook(ctx)
    t = step("audit", t)
    if args["miniature"] and shell is not None:  # after confinement: shrinking runs library code
        try:
            ctx.kept = shrink_namespace(shell.user_ns, cell_names(shell, args["source"]), args["miniature"])
        except Exception as exc:  # the run then says there was nothing to shrink
            ctx.miniature_error = f"{type(exc).__name__}: {exc}"
        step("miniature", t)
    try:  # the user's kernel comes first (lowered only now: a short setup is not worth being preempted)
        os.nice(5)
        if args["idle"]:  # background runs: only spare CPU time (inherited by worker processes)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        pass
    if args["mode"] == "run":  # processes the cell forks cannot write on the run's result channel
        os.register_at_fork(after_in_child=_channel_closer(ctx.result_fd, os.getpid()))
    ctx.steps["total"] = round((time.perf_counter() - t0) * 1000.0, 3)
    ctx.steps["cpu"] = round((ctx.cpu_before + time.process_time() - cpu0) * 1000.0, 3)
    _write_json(ctx.result_fd, {"event": "setup", "mode": ctx.mode, "reason": ctx.mode_reason,
                                "pool_threads": int(_POOLS.get("native") or 0),
                                "user_threads": list(_FT_LIVE["names"]),
                                "layer": ctx.layer, "fds": ctx.fds, "mappings": ctx.mappings,
                                "steps": ctx.steps, "pid": os.getpid(), "kept": ctx.kept})
    return ctx

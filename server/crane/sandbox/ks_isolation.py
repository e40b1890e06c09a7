"""Fork sandbox, kernel side, part 3: cutting the child's ties to the kernel and confining it.

Before any user code the child gets its own process group and a parent-death signal; every inherited
descriptor is re-pointed at /dev/null; fd 1/2, `sys.stdout`/`sys.stderr`, the display hook and publisher are
replaced by capture; ipykernel's output streams and session sends are neutralised; thread pools run single-
threaded; then `confine()` (seccomp.py) and the audit hook (ks_audit.py) are applied.
"""

from __future__ import annotations

import os
import signal
import sys

from crane.sandbox.ks_audit import _install_audit_hook  # kernel: strip
from crane.sandbox.ks_common import _SETUP, _Capture, _Ctx, _summarise_data  # kernel: strip
from crane.sandbox.seccomp import confine, set_parent_death_signal  # kernel: strip

_PUBLISHER: dict = {}  # a capturing display publisher, built once in the parent (cheaper for the child)


def _capture_publisher(shell) -> object:
    pub = _PUBLISHER.get("pub")
    if pub is None:
        from IPython.core.displaypub import DisplayPublisher

        class CapturePublisher(DisplayPublisher):
            sink: list = []

            def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
                if len(self.sink) < 50:
                    self.sink.append(_summarise_data(data, "display_data"))

            def clear_output(self, wait=False):
                pass

        pub = _PUBLISHER["pub"] = CapturePublisher(shell=shell)
    return pub



def _isolate_descriptors(ctx: _Ctx) -> None:
    """Re-point every inherited descriptor >= 3 (ZMQ sockets, the kernel's files) at /dev/null, fill the gaps
    so new descriptors get numbers above them, then open our own: result FIFO, stdout/stderr capture."""
    priv = ctx.args["dir"]
    inherited = [int(x) for x in os.listdir("/proc/self/fd")]
    devnull = os.open(os.devnull, os.O_RDONLY)
    top = max(inherited + [devnull])
    for fd in range(3, top + 1):
        if fd != devnull:
            os.dup2(devnull, fd, inheritable=False)
    ctx.inherited_max = top
    # ours (numbers > top)
    res = os.open(os.path.join(priv, "result"), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(res, True)
    ctx.result_fd = res
    _SETUP["result_fd"] = res
    if ctx.args.get("mode") == "session":
        cmd = os.open(os.path.join(priv, "commands"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(cmd, True)
        ctx.cmd_fd = cmd
    out = os.open(os.path.join(priv, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    err = os.open(os.path.join(priv, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    limit = int(ctx.args.get("output_limit", 1 << 20))
    ctx.stdout = _Capture(1, "<stdout>", limit)
    ctx.stderr = _Capture(2, "<stderr>", limit)


def _neutralise_kernel_io(ctx: _Ctx) -> None:
    """Nothing the child does may reach the kernel's iopub: replace streams, display hook and publisher, and
    make ipykernel's own stream/session objects write into the capture (or nowhere)."""
    sys.stdout, sys.stderr = ctx.stdout, ctx.stderr
    out, err = ctx.stdout, ctx.stderr
    if out is None or err is None:  # set by _isolate_descriptors, which runs first
        raise RuntimeError("the child's output is not captured")

    def _dh(value):
        if value is None:
            return
        try:
            import builtins
            builtins._ = value
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
    pub = _PUBLISHER.get("pub")
    if pub is not None:
        pub.sink = ctx.displays
        shell.display_pub = pub
    def _shown(*a, **k):  # a magic (e.g. %%time) caught the exception and shows it: still an error output
        if ctx.shown_exc is None:
            ctx.shown_exc = sys.exc_info()[1]

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


def _record_display(ctx: _Ctx, value, kind: str) -> None:
    if len(ctx.displays) >= 50:
        return
    try:
        data, _md = ctx.shell.display_formatter.format(value, include={"text/plain"})
    except Exception:
        try:
            data = {"text/plain": repr(value)}
        except Exception as exc:
            data = {"text/plain": f"<repr failed: {type(exc).__name__}>"}
    ctx.displays.append(_summarise_data(data, kind))


def _single_thread_pools() -> None:
    """OpenMP/BLAS pools of the kernel do not exist in the child (a GNU OpenMP region would hang there);
    run them single-threaded, which also keeps the user's kernel responsive on a small machine."""
    import ctypes
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(1)
        except Exception:
            pass
    paths = []

    class _Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

    def visit(info, size, data):
        name = info.contents.name
        if name:
            base = name.rsplit(b"/", 1)[-1].lower()
            if b"gomp" in base or b"iomp" in base or b"openblas" in base or b"mkl_rt" in base or b"blis" in base:
                paths.append(name.decode("utf-8", "replace"))
        return 0

    try:
        cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Info), ctypes.c_size_t, ctypes.c_void_p)(visit)
        ctypes.CDLL(None).dl_iterate_phdr(cb, None)
    except Exception:
        return
    # set to one thread, then join OpenBLAS's (re-created) workers: a single-threaded process can also be
    # checkpointed (forked again) safely
    names = ("omp_set_num_threads", "openblas_set_num_threads", "openblas_set_num_threads64_",
             "scipy_openblas_set_num_threads64_", "MKL_Set_Num_Threads", "bli_thread_set_num_threads",
             "blas_thread_shutdown_")
    for p in paths:
        try:
            lib = ctypes.CDLL(p, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
        for n in names:
            fn = getattr(lib, n, None)
            if fn is not None:
                try:
                    fn() if n == "blas_thread_shutdown_" else fn(1)
                except Exception:
                    pass


def _memory_budget_mb(requested: int) -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) // 1024
                    return max(64, min(requested, avail // 2))
    except OSError:
        pass
    return requested


def _machine_memory_bytes() -> int:
    total = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(("MemTotal:", "SwapTotal:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        pass
    return total


def _prepare_child(args: dict, shell, parent: int, on_main: bool) -> _Ctx:
    """Everything before user code: isolation, capture, confinement, audit hook, self-destruct timer."""
    try:
        os.setpgid(0, 0)  # the user's interrupt (sent to the kernel's process group) must not reach us
    except OSError:
        pass
    if on_main:
        set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)
    for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    try:
        os.nice(5)  # the user's kernel comes first
    except OSError:
        pass
    ctx = _Ctx(args, shell)
    _isolate_descriptors(ctx)
    _neutralise_kernel_io(ctx)
    sys.dont_write_bytecode = True
    os.environ["TMPDIR"] = ctx.scratch
    try:
        import tempfile
        tempfile.tempdir = ctx.scratch
    except Exception:
        pass
    _single_thread_pools()
    ctx.memory_mb = _memory_budget_mb(int(args.get("memory_mb", 2048)))
    budget = float(args.get("budget_s", 10.0))
    cpu = float(args.get("cpu_s", budget + 1.0))
    ctx.confinement = confine(
        scratch_dir=ctx.scratch,
        inherited_max_fd=ctx.inherited_max,
        cpu_s=cpu,
        memory_mb=ctx.memory_mb,
        file_mb=int(args.get("file_mb", 64)),
        fork_gate=args.get("fork_gate"),
    )
    _install_audit_hook(ctx)
    return ctx

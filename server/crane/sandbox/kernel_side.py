"""Kernel-side half of the fork sandbox: standard library + IPython's `get_ipython` only.

Its text (after `seccomp.py`'s, in the same namespace) is executed once into a private module in the user's
kernel (`sys.modules["_crane_sandbox_<hash>"]`); it binds no names in the user namespace. The daemon calls
`start(args_json)` through a private `user_expressions` request:

* in the kernel (parent): refuse quickly states that cannot be forked safely, `os.fork()`, start a reaper
  thread (waitpid, so no zombie is left; it writes the exit status to the private directory) and return
  `{"ok": True, "pid": ..., "start": ...}` at once;
* in the child: cut every tie to the kernel (own process group, parent-death signal, inherited descriptors
  re-pointed at /dev/null, fd 1/2 and `sys.stdout`/`sys.stderr`/display hook/display publisher replaced by
  capture, ipykernel's output streams and session sends neutralised), confine itself (`confine()` from
  `seccomp.py`), then run the target cell against the copy-on-write namespace, write one JSON result to the
  daemon's FIFO and end with `os._exit` — it never returns to the kernel's event loop.

`session(args_json)` starts a long-lived child serving the repair agent's SandboxSession commands (see
`session.py`), with the same confinement, plus checkpoint (nested fork) and rollback.
"""

from __future__ import annotations

import ast
import errno
import io
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below come from seccomp.py, executed into the same module namespace
    from crane.sandbox.seccomp import confine, landlock_abi, set_parent_death_signal, supported  # noqa: F401

CELL_FILENAME = "<crane-sandbox-cell>"
_CO_COROUTINE = 0x80
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_KNOWN_THREADS = ("MainThread", "IOPub", "Heartbeat", "Control", "Shell channel", "IPythonHistorySavingThread",
                  "crane-sandbox-reaper")


class SandboxBlocked(PermissionError):
    """Raised inside the sandbox child when the cell attempts a side effect (audit-hook level)."""


# ====================================================================== parent (the user's kernel) ======
def _unforkable() -> str | None:
    why = supported()
    if why:
        return why
    mods = sys.modules
    torch = mods.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "CUDA is initialised in torch: a forked child cannot use the GPU context"
        except Exception:
            pass
    for name, what in (("tensorflow", "TensorFlow"), ("jax", "JAX"), ("cupy", "CuPy")):
        if name in mods:
            return f"{what} is loaded: its runtime threads and device state do not survive fork"
    return None


def _check_private_dir(args: dict) -> str | None:
    try:
        with open(os.path.join(args["dir"], "token")) as f:
            if f.read() == args["token"]:
                return None
    except OSError:
        pass
    return "the kernel does not run on this machine (it cannot see the daemon's private directory)"


def _starttime(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _reap(pid: int, private_dir: str) -> None:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return
    info = {"exitcode": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}
    try:
        fd = os.open(os.path.join(private_dir, "status"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(info))
    except OSError:
        pass  # the daemon already cleaned up


_PUBLISHER: dict = {}  # a capturing display publisher, built once in the parent (cheaper for the child)


def _capture_publisher(shell):
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


def _fork(args: dict, child_main) -> dict:
    why = _unforkable() or _check_private_dir(args)
    if why:
        return {"ok": False, "verdict": "unavailable", "reason": why}
    try:
        from IPython import get_ipython
        shell = get_ipython()
        _capture_publisher(shell)
    except Exception:
        shell = None
    if shell is None:
        return {"ok": False, "verdict": "unavailable", "reason": "not an IPython kernel"}
    parent = os.getpid()
    on_main = threading.current_thread() is threading.main_thread()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"ok": False, "verdict": "unavailable", "reason": f"fork failed: {exc}"}
    if pid == 0:  # the child: never returns
        code = 70
        try:
            child_main(args, shell, parent, on_main)
            code = 0
        except BaseException:
            pass
        finally:
            os._exit(code)
    threading.Thread(target=_reap, args=(pid, args["dir"]), name="crane-sandbox-reaper", daemon=True).start()
    return {"ok": True, "pid": pid, "start": _starttime(pid)}


def start(args_json: str) -> dict:
    """Fork a sandbox child that runs one cell; return at once with its pid (parent side)."""
    return _fork(json.loads(args_json), _child_run)


def session(args_json: str) -> dict:
    """Fork a long-lived sandbox child serving SandboxSession commands (parent side)."""
    return _fork(json.loads(args_json), _child_session)


# ================================================================================= child: isolation ======
class _Capture(io.TextIOBase):
    """A text stream writing UTF-8 straight to a descriptor, keeping at most `limit` bytes."""

    def __init__(self, fd: int, name: str, limit: int):
        self._fd, self._name, self._left = fd, name, limit

    @property
    def name(self):
        return self._name

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if self._left > 0 and s:
            data = s.encode("utf-8", "replace")[: self._left]
            self._left -= len(data)
            while data:
                try:
                    n = os.write(self._fd, data)
                except InterruptedError:
                    continue
                except OSError:
                    self._left = 0
                    break
                data = data[n:]
        return len(s)

    def flush(self):
        pass


_SETUP: dict = {}  # child only: what setup got to, for reporting a failure


class _Ctx:
    """Everything the child set up, for running code and writing the result."""

    def __init__(self, args: dict, shell):
        self.args = args
        self.shell = shell
        self.result_fd = -1
        self.cmd_fd = -1
        self.inherited_max = 2
        self.displays: list[dict] = []
        self.denied: list[str] = []
        self.confinement: dict = {}
        self.scratch = os.path.realpath(args["scratch"])
        self.memory_mb = 0
        self.stdout: _Capture | None = None
        self.stderr: _Capture | None = None
        self.shown_exc: BaseException | None = None


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


def _summarise_data(data, kind: str) -> dict:
    text = ""
    if isinstance(data, dict):
        text = str(data.get("text/plain", ""))
        mimes = sorted(str(k) for k in data)
    else:
        mimes = []
    return {"kind": kind, "text": text[:4000], "mimetypes": mimes[:10]}


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


# ============================================================================ child: audit hook =====
_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
    "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1),
    "os.mkfifo": (0,), "os.mknod": (0,),
}
_DENY_EVENTS = {
    "os.system": "running a shell command", "os.exec": "executing a program", "os.posix_spawn": "starting a program",
    "os.spawn": "starting a program", "os.fork": "creating a process", "os.forkpty": "creating a process",
    "subprocess.Popen": "starting a program", "os.startfile": "opening a file with another program",
    "pty.spawn": "starting a program", "webbrowser.open": "opening a web browser", "os.killpg": "signalling processes",
    "socket.connect": "a network connection", "socket.bind": "binding a network socket",
    "socket.sendto": "sending network data", "socket.sendmsg": "sending network data",
    "socket.getaddrinfo": "network name resolution", "socket.gethostbyname": "network name resolution",
    "socket.gethostbyname_ex": "network name resolution", "socket.gethostbyaddr": "network name resolution",
    "urllib.Request": "a URL request", "http.client.connect": "an HTTP connection", "ftplib.connect": "an FTP connection",
    "smtplib.connect": "an SMTP connection", "poplib.connect": "a POP connection", "imaplib.open": "an IMAP connection",
    "nntplib.connect": "an NNTP connection", "telnetlib.Telnet.open": "a telnet connection",
    "resource.setrlimit": "changing resource limits", "resource.prlimit": "changing resource limits",
}


def _install_audit_hook(ctx: _Ctx) -> None:
    """A Python-level fence in front of the kernel-level one: clear messages and a record of what the cell
    tried. Raises SandboxBlocked (a PermissionError) so the operation never starts."""
    scratch = ctx.scratch
    inherited_max = ctx.inherited_max
    denied = ctx.denied
    realpath, fspath, exists = os.path.realpath, os.fsdecode, os.path.exists
    mypid = os.getpid()
    state = {"bypass": False}
    ctx.audit_state = state

    def inside(path) -> bool:
        if isinstance(path, int):
            return path > inherited_max or path in (1, 2)
        try:
            p = realpath(fspath(path))
        except Exception:
            return False
        return p == scratch or p.startswith(scratch + os.sep) or p == os.devnull

    def deny(what: str, target=None):
        msg = f"crane sandbox: {what} is blocked (the cell has side effects)"
        if target is not None:
            msg += f": {str(target)[:200]}"
        denied.append(msg)
        raise SandboxBlocked(errno.EPERM, msg)

    def hook(event, args):
        if state["bypass"]:
            return
        if event == "open":
            flags = args[2] if len(args) > 2 else 0
            if isinstance(flags, int) and flags & _WRITE_FLAGS and not inside(args[0]):
                deny("writing a file", args[0])
            return
        paths = _PATH_EVENTS.get(event)
        if paths is not None:
            for i in paths:
                if i < len(args) and not inside(args[i]):
                    deny(f"{event.split('.', 1)[1].replace('_', ' ')} on the file system", args[i])
            return
        what = _DENY_EVENTS.get(event)
        if what is not None:
            deny(what, args[0] if args and event not in ("os.fork", "os.forkpty") else None)
        elif event == "os.kill" and args and args[0] != mypid:
            deny("signalling another process", args[0])
        elif event == "sqlite3.connect" and args:
            db = args[0]
            name = fspath(db) if isinstance(db, (str, bytes, os.PathLike)) else ""
            if name and name != ":memory:" and "mode=memory" not in name and not name.startswith("file::memory:"):
                if not inside(name) and not exists(name):
                    deny("creating a database file", name)

    sys.addaudithook(hook)


# ============================================================================== child: running code ====
def _compile_plan(shell, source: str, filename: str, transformed: str):
    """IPython's transforms (magics, shell escapes, help) are already applied to `transformed`; one code
    object per top-level statement, the last expression compiled 'single' so its value goes to the display
    hook (IPython's `last_expr`)."""
    tree = ast.parse(transformed, filename=filename)
    if shell is not None:
        try:
            tree = shell.transform_ast(tree)
        except Exception:
            pass
    linecache.cache[filename] = (len(transformed), None, transformed.splitlines(True), filename)
    interactivity = getattr(shell, "ast_node_interactivity", "last_expr") if shell is not None else "last_expr"
    body = tree.body
    flags = (getattr(getattr(shell, "compile", None), "flags", 0) or 0) | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    quiet = source.rstrip().endswith(";")
    plan = []
    for i, node in enumerate(body):
        interactive = isinstance(node, ast.Expr) and not quiet and (
            interactivity == "all" or (interactivity in ("last_expr", "last_expr_or_assign", "last") and i == len(body) - 1)
        )
        if interactive:
            code = compile(ast.Interactive([node]), filename, "single", flags, dont_inherit=True)
        else:
            code = compile(ast.Module([node], []), filename, "exec", flags, dont_inherit=True)
        plan.append(code)
    return plan, transformed


def _exec_plan(ctx: _Ctx, plan, ns) -> None:
    for code in plan:
        if code.co_flags & _CO_COROUTINE:
            import asyncio
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(eval(code, ns))
            finally:
                try:
                    loop.close()
                except Exception:
                    pass
        else:
            exec(code, ns)


def _exception_chain(exc):
    seen, out = set(), []
    while exc is not None and id(exc) not in seen and len(out) < 20:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _is_landlock_denial(exc: OSError) -> bool:
    if exc.errno not in (errno.EACCES, errno.EROFS):
        return False
    if exc.errno == errno.EROFS or os.geteuid() == 0:
        return True
    target = exc.filename if isinstance(exc.filename, (str, bytes)) else None
    if target is None:
        return True
    parent = os.path.dirname(os.path.abspath(os.fsdecode(target))) or "."
    return os.access(target, os.W_OK) or (not os.path.exists(target) and os.access(parent, os.W_OK))


_SQLITE_DENIAL = ("readonly database", "unable to open database file", "disk i/o error")


def _classify(ctx: _Ctx, exc, as_limit: int) -> tuple[str, str | None]:
    """(verdict, reason) for an exception raised by the cell, or for a clean run (exc None)."""
    if exc is None:
        if ctx.denied:
            return "blocked", ctx.denied[0]
        return "no-crash", None
    chain = _exception_chain(exc)
    for e in chain:
        if isinstance(e, SandboxBlocked):
            return "blocked", str(e.strerror or e)
    for e in chain:
        if isinstance(e, OSError) and (e.errno == errno.EPERM or _is_landlock_denial(e)):
            return "blocked", f"the sandbox refused an operation the cell attempted: {e}"
    if ctx.denied:
        return "blocked", ctx.denied[0]
    for e in chain:
        if type(e).__name__ == "OperationalError" and any(s in str(e).lower() for s in _SQLITE_DENIAL):
            return "blocked", f"the sandbox refused a database write: {e}"
    for e in chain:
        if isinstance(e, MemoryError):
            wanted = getattr(e, "_total_size", None)
            machine = _machine_memory_bytes()
            if isinstance(wanted, int) and machine and wanted > machine:
                return "crash", f"the allocation ({wanted} bytes) exceeds this machine's memory"
            return "timeout", f"the cell exceeded the sandbox memory budget ({ctx.memory_mb} MiB)"
    return "crash", None


def _line_offset(source: str, transformed: str | None) -> int:
    """IPython's transforms drop leading blank lines; every other transform keeps line numbers."""
    if not transformed:
        return 0
    lines = source.splitlines()
    lead = 0
    while lead < len(lines) and not lines[lead].strip():
        lead += 1
    return lead if len(transformed.splitlines()) == len(lines) - lead else 0


def _cell_line(filename: str, lineno: int, n_src: int, source: str, offset: int = 0) -> int | None:
    if filename == CELL_FILENAME:
        lineno += offset
        return max(1, min(lineno, n_src)) if n_src else lineno
    if filename in ("<timed exec>", "<timed eval>", "<string>") and source.lstrip().startswith("%%"):
        return max(1, min(lineno + 1, n_src))
    return None


def _describe_exception(exc, source: str, transformed: str | None = None) -> dict:
    tb = exc.__traceback__
    frames = traceback.extract_tb(tb)
    n_src = len(source.splitlines())
    offset = _line_offset(source, transformed)
    line = None
    for fr in frames:
        ln = _cell_line(fr.filename, fr.lineno or 0, n_src, source, offset)
        if ln is not None:
            line = ln
    if isinstance(exc, SyntaxError) and exc.filename == CELL_FILENAME and exc.lineno:
        line = max(1, min(exc.lineno + offset, n_src or exc.lineno))
    keep = [fr for fr in frames if not (fr.filename or "").startswith("<crane-sandbox/")]
    if len(keep) > 8:
        keep = keep[:3] + keep[-5:]
    short = []
    for fr in keep:
        where = "cell" if fr.filename == CELL_FILENAME else fr.filename
        text = f"{where}, line {fr.lineno}, in {fr.name}"
        if fr.line:
            text += f": {fr.line.strip()[:160]}"
        short.append(text)
    try:
        evalue = str(exc)
    except Exception:
        evalue = "<str() failed>"
    short.append(f"{type(exc).__name__}: {evalue[:500]}")
    return {"ename": type(exc).__name__, "evalue": evalue[:4000], "line": line, "traceback": short}


def run_source(ctx: _Ctx, source: str) -> dict:
    """Run one cell's source in this (confined) process; the verdict record (without captured streams)."""
    shell = ctx.shell
    ns = shell.user_ns if shell is not None else {}
    t0 = time.perf_counter()
    exc = None
    transformed = None
    try:
        with shell.builtin_trap:
            transformed = shell.transform_cell(source)
            plan, _ = _compile_plan(shell, source, CELL_FILENAME, transformed)
            _exec_plan(ctx, plan, ns)
    except BaseException as e:  # noqa: BLE001 - the cell's own exception, SystemExit included
        exc = e
    if exc is None and ctx.shown_exc is not None:
        exc = ctx.shown_exc
    ctx.shown_exc = None
    elapsed = (time.perf_counter() - t0) * 1000.0
    verdict, reason = _classify(ctx, exc, ctx.confinement.get("as_limit", 0))
    rec = {"verdict": verdict, "reason": reason, "elapsed_ms": elapsed}
    if exc is not None:
        rec.update(_describe_exception(exc, source, transformed))
    return rec


def _write_json(fd: int, obj: dict) -> None:
    data = (json.dumps(obj, default=str) + "\n").encode("utf-8", "replace")
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[n:]


def _child_run(args: dict, shell, parent: int, on_main: bool) -> None:
    t0 = time.perf_counter()
    ctx = None
    try:
        ctx = _prepare_child(args, shell, parent, on_main)
    except BaseException as exc:  # never run user code unconfined
        fd = _SETUP.get("result_fd", -1)
        if fd >= 0:
            _write_json(fd, {"verdict": "unavailable", "reason": f"sandbox setup failed: {exc}"})
        return
    setup_ms = (time.perf_counter() - t0) * 1000.0
    signal.setitimer(signal.ITIMER_REAL, float(args.get("budget_s", 10.0)) + 1.5)
    rec = run_source(ctx, args["source"])
    signal.setitimer(signal.ITIMER_REAL, 0)
    rec["setup_ms"] = setup_ms
    rec["displays"] = ctx.displays
    rec["denied"] = ctx.denied[:20]
    rec["confinement"] = ctx.confinement
    ctx.audit_state["bypass"] = True
    _write_json(ctx.result_fd, rec)
    os.close(ctx.result_fd)


# ============================================================================== child: sessions ========
def _child_session(args: dict, shell, parent: int, on_main: bool) -> None:
    """Serve JSON-line commands from the daemon until told to close. See session.py for the protocol."""
    import secrets
    args = dict(args)
    args["fork_gate"] = secrets.randbits(63) | 1  # only our own checkpoint clone may pass the filter
    ctx = None
    try:
        ctx = _prepare_child(args, shell, parent, on_main)
    except BaseException as exc:
        fd = _SETUP.get("result_fd", -1)
        if fd >= 0:
            _write_json(fd, {"event": "error", "reason": f"sandbox setup failed: {exc}"})
        return
    _session_loop(ctx, args["fork_gate"])


def _read_commands(fd: int):
    buf = b""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return
        buf += chunk


def _gated_fork(gate: int) -> int:
    """fork() through the session's gate: a raw clone(SIGCHLD) carrying the secret in the (ignored)
    parent-tid argument, wrapped in CPython's own before/after-fork hooks."""
    import ctypes
    api = ctypes.pythonapi
    libc = ctypes.PyDLL(None)
    sc = libc.syscall
    sc.restype = ctypes.c_long
    sc.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    api.PyOS_BeforeFork()
    pid = sc(56, 17, 0, gate, 0, 0)
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "checkpoint fork failed")
    return pid


def _session_loop(ctx: _Ctx, gate: int) -> None:
    depth = 0
    out_path = os.path.join(ctx.args["dir"], "stdout")
    err_path = os.path.join(ctx.args["dir"], "stderr")
    _write_json(ctx.result_fd, {"event": "ready", "pid": os.getpid(), "depth": 0, "confinement": ctx.confinement})
    commands = _read_commands(ctx.cmd_fd)
    for line in commands:
        try:
            cmd = json.loads(line)
        except ValueError:
            _write_json(ctx.result_fd, {"event": "error", "reason": "bad command"})
            continue
        op = cmd.get("op")
        reply: dict = {"event": "reply", "id": cmd.get("id"), "pid": os.getpid(), "depth": depth}
        if op == "run":
            ctx.displays.clear()
            ctx.denied.clear()
            o0, e0 = _fsize(out_path), _fsize(err_path)
            signal.setitimer(signal.ITIMER_REAL, float(cmd.get("budget_s", 10.0)) + 1.5)
            rec = run_source(ctx, cmd.get("source", ""))
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec["displays"] = list(ctx.displays)
            rec["denied"] = ctx.denied[:20]
            rec["stdout_span"] = [o0, _fsize(out_path)]
            rec["stderr_span"] = [e0, _fsize(err_path)]
            reply.update(rec)
        elif op == "eval":
            try:
                with ctx.shell.builtin_trap:
                    value = eval(compile(cmd.get("expr", ""), CELL_FILENAME, "eval"), ctx.shell.user_ns)
                data, _ = ctx.shell.display_formatter.format(value, include={"text/plain"})
                reply.update({"ok": True, "value": str(data.get("text/plain", ""))[: int(cmd.get("limit", 4000))]})
            except BaseException as exc:  # noqa: BLE001
                reply.update({"ok": False, "ename": type(exc).__name__, "evalue": str(exc)[:2000]})
        elif op == "checkpoint":
            _single_thread_pools()
            threads = len(os.listdir("/proc/self/task"))
            if threads > 1:
                reply.update({"ok": False, "reason": f"{threads} threads are running; a checkpoint needs one"})
            else:
                try:
                    pid = _gated_fork(gate)
                except OSError as exc:
                    reply.update({"ok": False, "reason": str(exc)})
                else:
                    if pid == 0:  # the new head: carries on with the same command stream
                        set_parent_death_signal(signal.SIGKILL)
                        depth += 1
                        reply.update({"ok": True, "pid": os.getpid(), "depth": depth})
                    else:  # the checkpoint: frozen until the head ends
                        status = _wait_child(pid)
                        reply = {"event": "resumed", "id": cmd.get("id"), "pid": os.getpid(), "depth": depth,
                                 "reason": status}
        elif op == "rollback":
            if depth == 0:
                reply.update({"ok": False, "reason": "no checkpoint to roll back to"})
            else:
                os._exit(11)  # the checkpoint below wakes up and announces itself
        elif op == "close":
            os._exit(12)
        else:
            reply.update({"ok": False, "reason": f"unknown op {op!r}"})
        _write_json(ctx.result_fd, reply)


def _wait_child(pid: int) -> str:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            return "lost"
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if code == 12:
            os._exit(12)
        return "rollback" if code == 11 else f"exited ({code})"
    sig = os.WTERMSIG(status)
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = str(sig)
    return f"killed ({name})"


def _fsize(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0

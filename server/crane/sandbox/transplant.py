"""Daemon side of the transplant run: a cell of a kernel that cannot be forked safely, run in a fresh, confined
process of the kernel's own interpreter into which the state the cell reads is copied.

`transplant(conn, source, budget_s, reason=...)` (called by `fork_runner.speculate` when the kernel answers
`unforkable`: TensorFlow, JAX or CuPy loaded, CUDA initialised):
1. a private request (`_crane_transplant.export`, kernel/export.py; CRANE's private copy of cloudpickle is
   installed beside it as `_crane_cloudpickle`) writes the names the cell reads, pickled, into the run's
   private directory, with the kernel's interpreter, cwd, environment, `sys.path` and modules;
2. a worker (worker/main.py) of that interpreter takes the run: an idle warm one of the same interpreter (its
   heavy imports done) or a cold one started now. It confines itself like a forked child (namespaces, private
   layers, Landlock, seccomp, rlimits, no capabilities, oom_score_adj 1000) before loading the state;
   Large values are shrunk in the kernel before the copy (kernel/miniature's rules, on a copy of the cell's
   names): in a miniature run, and when they hold more than `copy_limit_mb()` (the run is then a miniature
   one, and the verdict says why);
3. its lines arrive on the run's result FIFO (a portable run's on the worker's stdout pipe: crane.sandbox.pipes)
   and are assembled exactly as a forked child's
   (`assemble.assemble`); the verdict says `mode="transplant"` and what was copied (`SandboxVerdict.transplant`).
One idle worker per kernel is kept warm (`CRANE_TRANSPLANT_WARM=0` turns it off), with that kernel's library
imports done; it ends after `SandboxOptions.worker_idle_seconds` without a run, when the daemon ends (its stdin closes) and when its kernel's
process ends (`_KernelWatch`: the daemon polls the kernels' pidfds and kills their workers, idle or running,
whose layered child and its pid namespace go with them; an idle worker also watches the kernel itself; a portable
run's kernel is watched through psutil instead, on every platform: crane.sandbox.process_watch). The
platform part (confinement) is behind `crane.sandbox.confinement`: Linux's namespaces, Landlock and seccomp;
elsewhere the run is `unavailable`, the reason naming the platform.
"""

from __future__ import annotations

import atexit
import builtins
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

import msgspec

from crane.kernel.client import KernelConnection, literal_value
from crane.kernel.errors import KernelError, KernelNotStarted, KernelTimeout
from crane.kernel.private_module import KernelModule, ModuleClient
from crane.sandbox.assemble import _GRACE_S, assemble
from crane.sandbox.background import bounded, data_cap, restore, start_low
from crane.sandbox.cell_deadline import CellClock, CellWatch, read_fifo, setup_reason, timeout_reason
from crane.sandbox.cell_names import DYNAMIC_READ, cell_attrs, cell_names, cell_read_first, cell_rebinds, cell_strings
from crane.sandbox.channel import SANDBOX_PARTS, ChildHandle, PrivateDir, RunOutcome, _starttime
from crane.sandbox.confinement import current as current_confinement
from crane.sandbox.copy_seal import at_end, seal_readable, settle
from crane.sandbox.cpu_clock import REASON as CPU_CLOCK_REASON
from crane.sandbox.cpu_clock import reads_cpu_clock
from crane.sandbox.export_request import ExportRequest, export_args
from crane.sandbox.kernel_program import untrusted_interpreter
from crane.sandbox.options import active as active_options
from crane.sandbox.oslayer import launch as os_launch
from crane.sandbox.oslayer import release as os_release
from crane.sandbox.oslayer import started as os_started
from crane.sandbox.pipes import PipeReader, PortableDir, ProcessHandle, read_run
from crane.sandbox.portable import Forked, read_forked, reuse_head
from crane.sandbox.process_watch import ProcessRef, ProcessWatch, process_ref
from crane.sandbox.set_order import built_set_read, ordered_set_reads
from crane.sandbox.shared.carry import CARRIED_RUNTIMES, REACH_ID_CALL
from crane.sandbox.verdict import ExitStatus, KeptObject, SandboxVerdict, TransplantInfo, unavailable
from crane.sandbox.worker_size import no_room

_HERE = Path(__file__).resolve().parent
BOOTSTRAP = (_HERE / "worker" / "boot.py").read_text(encoding="utf-8")  # the worker's `-c` program
TRANSPLANT_MODULE = KernelModule("_crane_transplant", "CRANE's private state export (not part of the notebook)",
                                 [_HERE / "kernel/pristine.py", _HERE / "kernel/shield.py", _HERE / "kernel/library.py", _HERE / "kernel/bound.py",
                                  _HERE / "../kernel_common/ipython_shell.py", _HERE / "kernel/stdlib_own.py", _HERE / "kernel/lookups.py", _HERE / "kernel/miniature.py",
                                  _HERE / "kernel/waiting.py", _HERE / "shared/carry.py", _HERE / "kernel/witness.py", _HERE / "kernel/proof.py", _HERE / "kernel/stops.py", _HERE / "kernel/pickling.py",
                                  _HERE / "kernel/environment.py", _HERE / "kernel/transformers.py", _HERE / "kernel/finalizers.py", _HERE / "kernel/export_request.py", _HERE / "kernel/dynamic_reads.py", _HERE / "kernel/library_attrs.py", _HERE / "kernel/keras_saved.py", _HERE / "shared/keras_layers.py", _HERE / "shared/own_modules.py", _HERE / "kernel/own_modules.py",
                                  _HERE / "shared/keras_graph.py", _HERE / "shared/tf_data.py",
                                  _HERE / "kernel/export.py"],
                                 threads=True)  # (the export's pickler thread: kernel/hooks_off.py)
WORKER_MODULE = KernelModule("_crane_sandbox", "CRANE's transplant worker",
                             [_HERE / p for p in SANDBOX_PARTS]
                             + [_HERE / "kernel/library.py", _HERE / "worker/devices.py", _HERE / "worker/guard.py",
                                _HERE / "shared/winjob.py", _HERE / "worker/limits.py", _HERE / "worker/seccomp.py", _HERE / "worker/linux.py", _HERE / "worker/after_import.py", _HERE / "worker/pools.py", _HERE / "worker/reaper.py", _HERE / "shared/view_names.py", _HERE / "worker/abs_paths.py", _HERE / "worker/portable.py", _HERE / "worker/head.py", _HERE / "worker/native.py", _HERE / "worker/arrow.py", _HERE / "worker/frames.py", _HERE / "worker/finalizers.py", _HERE / "worker/imports.py", _HERE / "worker/load_vet.py", _HERE / "shared/carry.py", _HERE / "shared/keras_layers.py", _HERE / "shared/keras_graph.py",
                                _HERE / "shared/own_modules.py", _HERE / "worker/warmup.py", _HERE / "worker/main.py"])


def _cloudpickle_source() -> Path:
    spec = importlib.util.find_spec("cloudpickle.cloudpickle")
    if spec is None or not spec.origin:
        raise ImportError("cloudpickle is not installed with CRANE")
    return Path(spec.origin)


CLOUDPICKLE_MODULE = KernelModule("_crane_cloudpickle", "CRANE's private copy of cloudpickle", [_cloudpickle_source()])

LOAD_S = 20.0  # the worker's own setup (imports, confinement, loading the state) on top of the cell's budget
EXPORT_TIMEOUT_S = 60.0


def copy_limit_mb() -> int:
    """The most a transplant copies whole (0: no limit): larger values the cell reads are shrunk in the kernel
    to consistent row subsets first (the run is then a miniature one). `SandboxOptions.transplant_copy_mb`."""
    return active_options().transplant_copy_mb


def idle_s() -> float:
    """An idle warm worker ends after this long (`SandboxOptions.worker_idle_seconds`)."""
    return active_options().worker_idle_seconds
_WORKER_ENV = {"CUDA_VISIBLE_DEVICES": "-1", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
# what of the kernel's environment a worker starts with (before it confines itself: nothing that chooses code to
# load, LD_PRELOAD, PYTHONPATH, PYTHONSTARTUP, plugin paths, ...); the rest is set once it is confined
_ENV_NAMES = {"HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "PATH", "TMPDIR", "SHELL", "MPLBACKEND",
              "XLA_FLAGS"}
_ENV_PREFIXES = ("LC_", "KERAS_", "TF_", "JAX_", "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "HF_", "TRANSFORMERS_",
                 "TOKENIZERS_", "PANDAS_", "NUMPY_", "PYTORCH_")
_ENV_NEVER = ("PRELOAD", "LD_", "PYTHON", "PATH", "LIBRARY", "PLUGIN", "_DIR", "HOME_")


def worker_env(env: dict) -> dict:
    """The allowlisted part of the kernel's environment a worker starts with, and its `PYTHONHASHSEED` where it is
    one (a number or `random`: it chooses no code; with the kernel's seed a set of strings iterates in the kernel's
    order, red team round 17h F8; the worker checks its hashes against the kernel's anyway: `str_hash`)."""
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            continue
        if k in _ENV_NAMES or (k.startswith(_ENV_PREFIXES) and not any(w in k for w in _ENV_NEVER)):
            out[k] = v
    seed = env.get("PYTHONHASHSEED")
    if isinstance(seed, str) and (seed == "random" or (seed.isdigit() and int(seed) <= 4294967295)):
        out["PYTHONHASHSEED"] = seed
    return out


def enabled() -> bool:
    """Whether unforkable kernels get copied runs (`SandboxOptions.transplant`)."""
    return active_options().transplant


class Worker:
    """One worker process (cold or warm), the daemon's child; serves one run."""

    def __init__(self, executable: str, env: dict, cwd: str, preload: list[str], warm: bool,
                 kernel: KernelRef | ProcessRef | None = None):
        self.kernel = kernel  # the kernel it serves: it ends with that kernel's process
        self.kernel_ended = False  # it was ended because its kernel's process ended
        self.home = tempfile.mkdtemp(prefix="crane-tw-")
        full = {**worker_env(env), **_WORKER_ENV, "IPYTHONDIR": os.path.join(self.home, "ipython")}
        self.warm = warm
        self.executable = executable
        self.started = time.monotonic()
        # the platform's OS layer (crane.sandbox.oslayer): macOS under sandbox-exec, Windows a job object and low
        # integrity once started (before it is sent anything), Linux's Landlock applied by the worker itself
        self.launch = os_launch([executable, "-c", BOOTSTRAP], env, self.home)
        full.update(self.launch.env)
        self.reader: PipeReader | None = None  # a portable run's result pipe (the worker's stdout), once it runs
        with open(os.path.join(self.home, "log"), "wb") as log:
            # stdin and stdout: anonymous pipes only the daemon and the worker hold (crane.sandbox.pipes)
            self.proc = subprocess.Popen(
                self.launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                cwd=cwd if os.path.isdir(cwd) else self.home, env=full, close_fds=True, start_new_session=True)
        self.os_layer = os_started(self.launch, self.proc).layer
        self.os_layers = self.os_layer.names()  # only a layer that ran
        header = {"modules": [[m.name, m.doc, list(m.sources)] for m in (CLOUDPICKLE_MODULE, WORKER_MODULE)],
                  "preload": preload, "idle_s": idle_s(), "warm": warm,
                  # an OS worker also watches its kernel itself (a pidfd); a portable one is ended by the daemon
                  "kernel": list(kernel) if isinstance(kernel, KernelRef) else None}
        self._send(json.dumps(header))

    def _send(self, line: str) -> None:
        stdin = self.proc.stdin
        if stdin is None:
            raise OSError("the worker has no stdin")
        stdin.write(line.encode("utf-8") + b"\n")
        stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, spec: dict, portable: bool = False) -> ChildHandle | ProcessHandle:
        """Hand it its run: a portable one answers on its stdout pipe, read from now on (`self.reader`) and is
        handled through its `Popen` handle; an OS-confined one on the FIFO of the run's PrivateDir (a pidfd)."""
        if portable:
            assert self.proc.stdout is not None
            if self.reader is None:  # (one reader for the worker's life: a head serves run after run)
                self.reader = PipeReader(self.proc.stdout)
            self._send(json.dumps(spec))
            return ProcessHandle(self.proc)
        else:
            self._send(json.dumps(spec))
            return ChildHandle(self.proc.pid, _starttime(self.proc.pid))

    def send_bytes(self, data: bytes) -> None:
        """A portable session's command lines go down its stdin."""
        stdin = self.proc.stdin
        if stdin is None:
            raise OSError("the worker has no stdin")
        stdin.write(data)
        stdin.flush()

    def ready(self) -> bool:
        """Its imports are done and it waits for a run."""
        return os.path.exists(os.path.join(self.home, "ready"))

    def log_tail(self) -> str:
        try:
            return Path(self.home, "log").read_bytes()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill it and its process group (it leads a session of its own; its layered child, in a process group
        and pid namespace of its own, dies with it through its parent-death signal). Not yet reaped, so neither
        pid can have been reused."""
        if self.proc.returncode is not None:
            return
        for kill in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), self.proc.kill):
            try:
                kill()
            except (OSError, AttributeError):  # (no process groups on Windows: the handle's kill ends the worker)
                pass

    def end(self) -> ExitStatus | None:
        """Kill it and what it started (also when it has exited: a process it left behind is still in its group),
        reap it, remove its directory: its exit status."""
        status = None
        self.kill()
        try:
            code = self.proc.wait(5.0)
            status = ExitStatus(exitcode=code if code >= 0 else None, signal=-code if code < 0 else None)
        except subprocess.TimeoutExpired:
            pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        os_release(self.launch)  # (Windows: the job's handle)
        shutil.rmtree(self.home, ignore_errors=True)
        return status


class KernelRef(NamedTuple):
    """A kernel's process as the daemon sees it (pid and start time: immune to pid reuse)."""

    pid: int
    start: int


def _own_pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def kernel_vm_mb(kernel: KernelRef | ProcessRef | None) -> int:
    """The virtual size (MiB) of the kernel's process that answered the export, read in /proc (0: not a kernel
    the daemon sees there, or no longer the same process): a transplant worker's address-space floor
    (`SandboxRequest.vm_floor_mb`)."""
    if not isinstance(kernel, KernelRef):
        return 0
    try:
        with open(f"/proc/{kernel.pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return 0
    if _starttime(kernel.pid) != kernel.start:
        return 0
    for line in status.splitlines():
        if line.startswith(b"VmSize:"):
            parts = line.split()
            return int(parts[1]) >> 10 if len(parts) > 1 and parts[1].isdigit() else 0
    return 0


def vm_floor_mb(kernel: KernelRef | ProcessRef | None, exp: ExportReply) -> int:
    """A transplant run's address-space floor: the kernel's size less the values the copy maps anew (review r1
    M2). The run's `memory_mb` is the budget plus `exp.bytes`, which the worker loads after its limit is set,
    while the kernel's size already holds those values (before shrinking: `raw_bytes`): a floor of the kernel's
    whole size counted them twice and gave the cell their size again on top of its budget. The limit is then
    max(worker + copy, kernel) + budget: a fork's (kernel + budget, its data shared) where the kernel is larger,
    still room for the reservations its libraries make once per process (a0b81d5)."""
    held = max(exp.bytes, exp.raw_bytes if exp.kept else 0)
    return max(0, kernel_vm_mb(kernel) - (held >> 20))


def kernel_ref(pid: int, start: int, pidns: int | None) -> KernelRef | None:
    """The kernel's process, when it lives in the daemon's pid namespace and is the one that answered (else its
    workers end only with the daemon or after idling)."""
    if pid <= 0 or pidns is None or pidns != _own_pid_namespace() or _starttime(pid) != start:
        return None
    return KernelRef(pid, start)


class _KernelWatch:
    """One daemon thread polling the pidfds of the kernels that have workers; `on_gone(ref)` when one ends."""

    def __init__(self, on_gone) -> None:
        self.on_gone = on_gone
        self.lock = threading.Lock()
        self.fds: dict[KernelRef, int] = {}
        self.wake: tuple[int, int] | None = None

    def watch(self, ref: KernelRef) -> bool:
        """Start watching `ref` (False: it is already gone or cannot be watched)."""
        with self.lock:
            if ref in self.fds:
                return True
            try:
                fd = os.pidfd_open(ref.pid)
            except (OSError, AttributeError):
                return False
            if _starttime(ref.pid) != ref.start:
                os.close(fd)
                return False
            self.fds[ref] = fd
            if self.wake is None:
                self.wake = os.pipe()
                threading.Thread(target=self._loop, name="crane-transplant-kernels", daemon=True).start()
            else:
                os.write(self.wake[1], b"w")
        return True

    def _loop(self) -> None:
        assert self.wake is not None
        wake_r = self.wake[0]
        while True:
            with self.lock:
                by_fd = {fd: ref for ref, fd in self.fds.items()}
            ready, _, _ = select.select([wake_r, *by_fd], [], [])
            if wake_r in ready:
                os.read(wake_r, 4096)
            for fd in ready:
                ref = by_fd.get(fd)
                if ref is None:
                    continue
                with self.lock:
                    self.fds.pop(ref, None)
                os.close(fd)
                self.on_gone(ref)


def kernel_of(exp: ExportReply, portable: bool, asked_at: float) -> KernelRef | ProcessRef | None:
    """The kernel's process that answered `exp`, as the run's sandbox watches it: a portable run's through psutil
    (crane.sandbox.process_watch: pid and creation time, every platform), an OS run's through /proc and pidfds.
    `asked_at`: `time.time()` before the export was asked for."""
    if portable:
        return process_ref(exp.kernel_pid, exp.kernel_start, asked_at)
    else:
        return kernel_ref(exp.kernel_pid, exp.kernel_start, exp.kernel_pidns)


class _Pool:
    """At most one idle warm worker per kernel (its interpreter, its imports); the workers running now."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, KernelRef | ProcessRef | None], Worker] = {}
        self.busy: set[Worker] = set()
        self.preloads: weakref.WeakKeyDictionary[Worker, frozenset[str]] = weakref.WeakKeyDictionary()  # its imports
        self.lowered: weakref.WeakSet[Worker] = weakref.WeakSet()  # prewarmed: started at background priority
        self.os_watch = _KernelWatch(self.kernel_gone)  # the OS sandbox's kernels: pidfds
        self.portable_watch = ProcessWatch(self.kernel_gone)  # the portable sandbox's: psutil

    def _watch(self, kernel: KernelRef | ProcessRef) -> bool:
        """Watch `kernel` (False: it has already ended, or cannot be watched)."""
        if isinstance(kernel, ProcessRef):
            return self.portable_watch.watch(kernel)
        return self.os_watch.watch(kernel)

    def take(self, executable: str, kernel: KernelRef | ProcessRef | None = None) -> Worker | None:
        with self.lock:
            w = self.idle.pop((executable, kernel), None)
        if w is None:
            return None
        if not w.alive() or time.monotonic() - w.started > idle_s() - 5:
            w.end()
            return None
        if w in self.lowered:  # a prewarmed worker takes a foreground run: its normal priority where allowed
            self.lowered.discard(w)
            restore(w.proc.pid)
        return w

    def serving(self, worker: Worker) -> bool:
        """`worker` takes a run now; False when its kernel has already ended (then it is not run)."""
        if worker.kernel is not None and not self._watch(worker.kernel):
            worker.kernel_ended = True
            return False
        with self.lock:
            self.busy.add(worker)
        return True

    def done(self, worker: Worker) -> None:
        with self.lock:
            self.busy.discard(worker)

    def give_back(self, worker: Worker, modules: list[str]) -> bool:
        """A head that served a run waits for the next one (worker/head.py): it is `worker.kernel`'s idle worker
        again, unless that kernel has one already or has ended, or the machine is short of memory for an idle
        worker (the same floor as a refill's: `SandboxOptions.prewarm_free_mb`) (False: the caller ends it)."""
        key = (worker.executable, worker.kernel)
        if not worker.alive() or worker.kernel_ended or no_room(modules, active_options().prewarm_free_mb):
            return False
        with self.lock:
            old = self.idle.get(key)
            if old is not None and old.alive():
                return False
            self.idle[key] = worker
            self.preloads[worker] = self.preloads.get(worker, frozenset()) | frozenset(modules)
        worker.warm, worker.started = True, time.monotonic()
        if worker.kernel is not None and not self._watch(worker.kernel):
            self.kernel_gone(worker.kernel)
        return True

    def refill(self, executable: str, env: dict, cwd: str, preload: list[str],
               kernel: KernelRef | ProcessRef | None = None) -> None:
        if not active_options().warm_workers:
            return
        key = (executable, kernel)
        with self.lock:
            if key in self.idle and self.idle[key].alive():
                return
        if kernel is not None and not self._watch(kernel):
            return  # its kernel has ended: no worker for it
        if no_room(preload, active_options().prewarm_free_mb):
            return  # the machine is short of memory: the next run starts its own
        try:  # in the background like a prewarmed one: it must not slow the user's kernel (prewarm's docstring)
            w = start_low(lambda: Worker(executable, env, cwd, preload, warm=True, kernel=kernel))
        except OSError:
            return
        bounded(w.proc.pid, data_cap())
        with self.lock:
            old = self.idle.pop(key, None)
            self.idle[key] = w
            self.preloads[w] = frozenset(preload)
            self.lowered.add(w)
        if old is not None:
            old.end()
        if kernel is not None and not self._watch(kernel):
            self.kernel_gone(kernel)  # it ended meanwhile

    def prewarm(self, executable: str, env: dict, cwd: str, preload: list[str], kernel: KernelRef | ProcessRef,
                heavy: Collection[str]) -> Worker | None:
        """Start `kernel`'s idle worker ahead of its first run (crane.sandbox.prewarm), importing `preload`, at the
        lowest CPU and I/O priority, first to go under memory pressure, its private memory capped
        (`background.data_cap`) until its run sets its own limit (crane.sandbox.background). An idle worker of
        that kernel whose imports already hold every `heavy` library is kept (None: nothing started); any other
        is replaced (at most one idle worker per kernel)."""
        key = (executable, kernel)
        with self.lock:
            old = self.idle.get(key)
            if old is not None and old.alive() and frozenset(heavy) <= self.preloads.get(old, frozenset()):
                return None
        if not self._watch(kernel):
            return None  # its kernel has ended
        w = start_low(lambda: Worker(executable, env, cwd, list(preload), warm=True, kernel=kernel))
        bounded(w.proc.pid, data_cap())
        with self.lock:
            old = self.idle.pop(key, None)
            self.idle[key] = w
            self.preloads[w] = frozenset(preload)
            self.lowered.add(w)
        if old is not None:
            threading.Thread(target=old.end, name="crane-transplant-reap", daemon=True).start()
        if not self._watch(kernel):
            self.kernel_gone(kernel)  # it ended meanwhile
        return w

    def kernel_gone(self, kernel: KernelRef | ProcessRef) -> None:
        """The kernel's process ended: end its workers, idle or running (with their whole process trees)."""
        with self.lock:
            idle = [self.idle.pop(k) for k in [k for k in self.idle if k[1] == kernel]]
            busy = [w for w in self.busy if w.kernel == kernel]
        for w in busy + idle:
            w.kernel_ended = True
            w.kill()
        for w in idle:
            threading.Thread(target=w.end, name="crane-transplant-reap", daemon=True).start()

    def workers_of(self, kernel: KernelRef | ProcessRef) -> list[Worker]:
        """The workers (idle or running) that serve `kernel` (tests)."""
        with self.lock:
            return [w for k, w in self.idle.items() if k[1] == kernel] + [w for w in self.busy if w.kernel == kernel]

    def wait_ready(self, executable: str, timeout: float) -> bool:
        """Wait until an idle worker of `executable` is warm (benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                ws = [w for k, w in self.idle.items() if k[0] == executable]
            if any(w.ready() for w in ws):
                return True
            time.sleep(0.05)
        return False

    def shutdown(self) -> None:
        with self.lock:
            workers, self.idle = list(self.idle.values()), {}
            workers += list(self.busy)
        for w in workers:
            w.end()


POOL = _Pool()
atexit.register(POOL.shutdown)


class ExportReply(msgspec.Struct):
    ok: bool
    reason: str | None = None
    copied: list[tuple[str, str]] = []
    bytes: int = 0
    executable: str = ""
    modules: list[str] = []
    cuda: bool = False
    export_ms: float = 0.0
    kernel_pid: int = 0  # the kernel's process (its workers end with it), its start time and pid namespace
    kernel_start: int = 0
    kernel_pidns: int | None = None
    kept: list[KeptObject] = []  # values shrunk before the copy (miniature rules)
    shrunk: str | None = None  # why, when the run was not asked to be a miniature (too much to copy whole)
    raw_bytes: int = 0  # the memory of the values the cell reads, before shrinking
    shrink_error: str | None = None
    carried: list[str] = []  # rebuilt runtimes whose process-wide state the copy carries (kernel/export `_settings`)
    patched: list[str] = []  # library classes of copied values the notebook patched (kernel/export)
    traced: list[str] = []  # copied Keras models the kernel traced (kernel/environment._traced_models)
    # values the cell rebinds whose freeing runs Python code (a `__del__`, a weak callback), which could not be
    # copied: the cell's rebinding runs that code in the kernel, never in the copy (kernel/finalizers.py)
    finalizers_left_out: list[str] = []
    transformers: bool = False  # the notebook's cell transformers were copied (kernel/transformers.py)
    watch: str | None = None  # what stopped the export as soon as a request waited (None: only its time cap)
    transient: bool = False  # stopped for a waiting request or by its kernel-time cap: a passing cause
    # CRANE's cloudpickle sealed again after CRANE's changes to it at its first export (the new seal's addresses:
    # kernel/pickling._cloudpickle); the daemon calls it by that seal from then on
    cp_seal: tuple[str, str, str] | None = None


def _export(conn: KernelConnection, pdir: PrivateDir | PortableDir, source: str, timeout: float,
            miniature: dict | None = None, *, skip: list[str] | None = None, tag: int = 0,
            copy_mb: int | None = None, cancel: threading.Event | None = None,
            one_request: bool = False) -> ExportReply:
    """Ask the kernel to write the state `source` reads into `pdir` (kernel/export.py). The names are found here
    (`cell_names`), never by the kernel's input transformers; the kernel stops by itself after `SandboxOptions.export_seconds` and
    when `cancel` is set (a `cancel` file in `pdir`, which the export polls). `one_request`: `pdir` is the run's
    own, removed when it returns (`transplant`): the export's request is also the busy check (see below)."""
    cp, export = ModuleClient(conn, CLOUDPICKLE_MODULE), ModuleClient(conn, TRANSPLANT_MODULE)
    if not one_request or export.address is None or cp.address is None:  # (first installs: checked first, quickly)
        out = cp.evaluate({"v": cp.version_expression(), "t": export.version_expression()}, timeout, "transplant check")
        if literal_value(out.get("t"), "transplant check", KernelError) != TRANSPLANT_MODULE.version:
            export.ensure_installed(timeout=max(timeout, 10.0))  # first: it refuses to install over a patched stdlib
        if literal_value(out.get("v"), "transplant check", KernelError) != CLOUDPICKLE_MODULE.version:
            cp.ensure_installed(timeout=max(timeout, 10.0))
    # else no separate check: the export's own request checks both modules (ModuleClient.call, installing again
    # where either is gone) and finds a busy kernel as quickly (`start_timeout`: the kernel starts on it within
    # `timeout`, then it may take EXPORT_TIMEOUT_S); one round trip to the kernel less per verdict. The request a
    # busy kernel did not start stays queued there: it runs once the user's cell ends and finds its folder gone
    # (kernel/export.py stats the token file first); the folder's `cancel` is made and its token taken away at once
    opts = active_options()
    args = export_args(ExportRequest(
        dir=pdir.path, token=pdir.token, names=cell_read_first(source), strings=cell_strings(source),
        by_string=DYNAMIC_READ.search(source) is not None, attrs=cell_attrs(source),
        rebinds=cell_rebinds(source),
        skip=list(skip or []), tag=tag,
        copy_mb=copy_limit_mb() if copy_mb is None else copy_mb, max_s=opts.export_seconds,
        watched_max_s=opts.watched_export_seconds, miniature=miniature or None))
    done = threading.Event()

    def forward() -> None:  # the daemon's cancel reaches the kernel's export through its directory
        while cancel is not None and not done.wait(0.05):
            if cancel.is_set():
                try:
                    Path(pdir.path, "cancel").touch()
                except OSError:
                    pass
                return

    if cancel is not None:
        threading.Thread(target=forward, name="crane-export-cancel", daemon=True).start()
    try:
        raw = export.call("export", args, timeout=EXPORT_TIMEOUT_S, what="transplant export", also=(cp,),
                          start_timeout=timeout if one_request else None)
    except KernelNotStarted:
        _disown(pdir)
        raise
    finally:
        done.set()
    reply = msgspec.convert(raw, ExportReply)
    if reply.cp_seal is not None:
        cp.adopt(reply.cp_seal)  # (made by the export this process asked for, in that request: kernel/pickling)
    return reply


def _disown(pdir: PrivateDir | PortableDir) -> None:
    """An export request the kernel has not started is left queued there: whenever it starts, it finds no token
    (it stops at its first step) or, started in between, its `cancel` (it stops at its next check)."""
    for name, make in (("cancel", True), ("token", False)):
        try:
            if make:
                Path(pdir.path, name).touch()
            else:
                os.unlink(os.path.join(pdir.path, name))
        except OSError:
            pass


def _read_phase(pdir: PrivateDir | PortableDir) -> str | None:
    """What the kernel's export last said it was doing (kernel/export's `phase` file), if anything."""
    try:
        with open(os.path.join(pdir.path, "phase"), encoding="utf-8") as f:
            text = f.read(32)
    except OSError:
        return None
    return text if text in ("shrinking", "copying") else None


def transplant(
    conn: KernelConnection,
    source: str,
    budget_s: float,
    *,
    reason: str | None = None,
    memory_mb: int = 2048,
    request_timeout: float = 5.0,
    layer: str = "auto",
    places: list[str] | tuple[str, ...] = (),
    idle: bool = False,
    cancel: threading.Event | None = None,
    miniature: dict | None = None,
    max_processes: int = 1000,
    map_devices: bool = False,
    portable: str | None = None,
    confinement: str = "portable",
) -> SandboxVerdict:
    """Run `source` in a confined worker process on a copy of the state it reads (see the module docstring).
    Never raises. `reason`: why the kernel was not forked (said in the verdict). `map_devices`: map torch's
    cuda/mps requests to the CPU even when the kernel's torch had no CUDA. `portable`: why the run is a portable
    one (crane.sandbox.portable: the platform's OS layer, the call guard and the audit hook confine the worker), or
    None; `confinement`: "guard" for the guard and the hook alone (asked for)."""
    t0 = time.monotonic()
    why = None if portable else current_confinement().runs("transplant")
    if why:
        return unavailable(why)
    try:  # the portable run's channel is the worker's pipes (crane.sandbox.pipes), the OS run's a FIFO
        pdir: PrivateDir | PortableDir = PortableDir() if portable else PrivateDir()
    except OSError as exc:
        return unavailable(f"cannot create the sandbox's private directory: {exc}")
    worker: Worker | None = None
    child: ChildHandle | ProcessHandle | None = None
    try:
        asked_at = time.time()
        try:
            exp = _export(conn, pdir, source, request_timeout, miniature, cancel=cancel, one_request=True)
        except KernelTimeout:
            phase = _read_phase(pdir)
            return unavailable("the kernel is busy (it did not answer the transplant request in time"
                               + (f"; its export was {phase}" if phase else "") + ")")
        except (KernelError, msgspec.ValidationError) as exc:
            return unavailable(f"the kernel's state could not be exported: {exc}")
        if not exp.ok:
            v = unavailable(exp.reason or "the kernel's state could not be exported")
            v.transient = exp.transient
            return v
        with open(os.path.join(pdir.path, "env.json")) as f:
            facts = json.load(f)
        exe, env, cwd = exp.executable, dict(facts.get("env") or {}), str(facts.get("cwd") or "/")
        # its workers end with the kernel's process (the portable path watches it through psutil: no /proc, no pidfd)
        kernel = kernel_of(exp, bool(portable), asked_at)
        why = untrusted_interpreter(exe, kernel)  # (the program the kernel's process runs, never the reply's path alone)
        if why:
            return unavailable(why)
        worker = POOL.take(exe, kernel)
        if worker is None:
            worker = Worker(exe, env, cwd, exp.modules, warm=False, kernel=kernel)
        if not POOL.serving(worker):
            return unavailable("the kernel ended before its transplant run started")
        request = pdir.request(mode="run", source=source, budget_s=float(budget_s) + LOAD_S,
                               memory_mb=int(memory_mb) + (exp.bytes >> 20), output_limit=64 * 1024,
                               layer="blocking" if layer == "blocking" else "auto", places=list(places),
                               idle=bool(idle), max_processes=int(max_processes),
                               vm_floor_mb=0 if portable else vm_floor_mb(kernel, exp))
        if portable:  # -- the portable sandbox (worker/portable.py)
            request = msgspec.structs.replace(request, confinement="guard" if confinement == "guard" else "portable",
                                              portable_reason=portable,
                                              os_layers=list(worker.os_layers))
        shrunk = {"kept": [msgspec.to_builtins(k) for k in exp.kept], "requested": bool(miniature),
                  "error": exp.shrink_error, "why": exp.shrunk}
        fork = bool(portable) and reuse_head(confinement)  # run in a fork child of a warm head (worker/head.py)
        child = worker.run({"args": msgspec.to_builtins(request), "budget_s": float(budget_s), "map_devices": bool(map_devices),
                            "shrunk": shrunk, "fork": fork}, portable=bool(portable))
        # the setup's allowance, then the cell's budget from its start (crane.sandbox.cell_deadline: the daemon's
        # kill, where the worker's own timer cannot end the cell)
        deadline = time.monotonic() + float(budget_s) + LOAD_S + _GRACE_S
        clock = CellClock(float(budget_s), cancel)
        forked = None
        if fork:
            assert worker.reader is not None
            watch = CellWatch(worker.reader, clock, framed=True)
            forked = read_forked(watch, deadline, clock)
            forked = forked._replace(how=clock.how(forked.how))
            live = not watch.framed and not watch.off  # (an `S` run's lines came live; a fork child's framed)
            data, how = forked.data, forked.how
        elif portable:
            assert worker.reader is not None
            data, how = read_run(CellWatch(worker.reader, clock), deadline, clock)  # type: ignore[arg-type]
            how, live = clock.how(how), True
        else:
            assert isinstance(pdir, PrivateDir) and isinstance(child, ChildHandle)
            own, wpid = pdir, worker.proc.pid  # (the run is over once sealed, whoever holds its channel: fixD)
            data, how = read_fifo(pdir.result_fd, child, deadline, clock, sealed=(lambda: at_end(
                wpid, lambda: own.exit_status(0.0))) if seal_readable() else None)
            live = True
        deadline = clock.until(deadline)
        status, sealing = _run_end(worker, pdir, forked, how, deadline, cancel)
        if status is None and how not in ("deadline", "cancelled") and sealing and (forked is None or
                                                                                      forked.status is None):
            how = "deadline" if time.monotonic() >= deadline else "cancelled"  # (neither sealed nor ended in time)
        if how in ("deadline", "cancelled"):
            child.kill()
        keep = forked is not None and forked.again and how in ("record", "eof")  # the head serves the next run
        if status is None:
            status = worker.end() if how != "record" or sealing else None
            if status is not None and not sealing:
                status.checked = False  # (no /proc here: the record is read as it came, docs/sandbox.md)
        if worker.kernel_ended:
            return unavailable("the kernel ended during the run: its transplant worker was ended with it")
        outcome = RunOutcome(data, how, status, pdir.read_capture("stdout"), pdir.read_capture("stderr"))
        v = assemble(outcome, float(budget_s), int(memory_mb), expect_seal=sealing)
        if v.verdict == "unavailable" and status is not None and status.exitcode == 70:
            v.reason = f"{v.reason}: {worker.log_tail().strip().splitlines()[-1:] or ''}"
        v.pid, v.channel = worker.proc.pid, "local"
        info = TransplantInfo(
            copied=[f"{n} ({t})" for n, t in exp.copied][:50], bytes=exp.bytes, warm=worker.warm,
            confinement=v.mode if v.mode in ("layered", "blocking") else None, export_ms=exp.export_ms, devices_mapped=bool(map_devices or exp.cuda),
            not_imported=[], shrunk=exp.shrunk, raw_bytes=exp.raw_bytes, export_watch=exp.watch,
        )
        if how == "deadline" and v.verdict == "timeout":  # which deadline ended it (crane.sandbox.cell_deadline)
            if clock.deadline is not None:
                v.reason = timeout_reason(float(budget_s))
            elif live:
                v.reason = setup_reason(float(budget_s) + LOAD_S)
        if exp.shrunk and v.verdict == "timeout" and "artefact" in (v.reason or ""):
            v.reason = (v.reason or "").replace("the full run did not finish in time",
                                                f"the full state was not copied: {exp.shrunk}")
        setup_extra = _setup_transplant(data)
        info.devices_mapped = bool(setup_extra.get("devices_mapped", info.devices_mapped))
        info.not_imported = [str(x) for x in setup_extra.get("not_imported") or []]
        v.transplant = info
        v.mode, v.mode_reason = "transplant", reason
        if portable:  # -- the portable sandbox: which layers ran (the worker's record says)
            v.mode, v.mode_reason = "portable", portable
            info.confinement = None
            info.layers = _portable_layers(data) or ["call guard", "audit hook", *worker.os_layers]
        missed_finalizer = _finalizers_missed(data) if v.verdict == "no-crash" else None
        left_out = _left_out_doubt(exp) if v.verdict in ("crash", "no-crash") else None
        if left_out and v.verdict == "no-crash":
            v.certain, v.reason = False, f"the clean run is only likely: {left_out}"
        elif missed_finalizer:  # the cell freed a copied object whose kernel finalizer the copy could not run
            v.certain, v.reason = False, f"the clean run is only likely: {missed_finalizer}"
        elif v.verdict == "no-crash" and (history := history_doubt(source)):
            v.certain, v.reason = False, f"the clean run is only likely: {history}"
        elif v.verdict == "no-crash" and (held := clean_doubt(source, setup_extra.get("settings_missed") or [], facts)):
            v.certain, v.reason = False, f"the clean run is only likely: {held}"
        if v.verdict == "crash":
            doubt = copy_crash_doubt(v, source, CopyFacts(
                copied=list(exp.copied), carried=list(exp.carried), patched=list(exp.patched), traced=list(exp.traced),
                settings_missed=[str(m) for m in setup_extra.get("settings_missed") or []]), facts)
            if portable and _view_touched(data):  # the run's view of the folder may be what failed (P6)
                doubt = doubt or "the run's view of the notebook's folder may be what failed"
            doubt = doubt or left_out
            v.certain = doubt is None
            if doubt is not None:  # (issue 42, h5: said where a repair starts from this crash)
                v.reason = likely_reason(v.reason, doubt)
        total_ms = (time.monotonic() - t0) * 1000.0
        if how in ("deadline", "cancelled"):
            v.elapsed_ms, v.overhead_ms = total_ms, 0.0
        else:
            v.overhead_ms = max(0.0, total_ms - v.elapsed_ms)
        POOL.done(worker)
        if keep and POOL.give_back(worker, exp.modules):
            worker = None  # (not ended below)
        else:
            POOL.refill(exe, env, cwd, exp.modules, kernel)
        return v
    except Exception as exc:  # the daemon never dies from one sandbox run
        return unavailable(f"transplant error: {type(exc).__name__}: {exc}")
    finally:
        if worker is not None:
            POOL.done(worker)
            threading.Thread(target=worker.end, name="crane-transplant-reap", daemon=True).start()
        if child is not None:
            child.close()
        pdir.cleanup()


def _run_end(worker: Worker, pdir: PrivateDir | PortableDir, forked: Forked | None, how: str, deadline: float,
             cancel: threading.Event | None) -> tuple[ExitStatus | None, bool]:
    """How the run's process ended, as its parent saw it (issue 41: crane.sandbox.copy_seal), and whether a seal was
    looked for (Linux). A head's fork child: the head's word, in its frame; a worker that ran the cell itself: the
    daemon's own look at it once its channel ended (layered: A's word in the private directory)."""
    sealing = seal_readable()
    if forked is not None and forked.status is not None:
        return ExitStatus(exitcode=forked.status[0], signal=forked.status[1],
                          sealed=list(forked.sealed) if forked.sealed else None, checked=forked.checked,
                          by_parent=forked.sealed is not None), sealing
    if not sealing or how in ("deadline", "cancelled"):
        return None, sealing

    def parent_word() -> ExitStatus | None:
        return pdir.exit_status(0.0) if isinstance(pdir, PrivateDir) else None

    status, _ = settle(worker.proc.pid, worker.proc.poll, worker.kill, parent_word, deadline, cancel)
    return status, sealing


def _view_touched(data: bytes) -> bool:
    """A portable worker's crash that went near what tells its view of the folder from the real one (its record's
    `confinement.view_touched`, worker/portable.py)."""
    from crane.sandbox.assemble import parse_lines

    rec = parse_lines(data).record
    return bool(rec is not None and isinstance(rec.confinement, dict) and rec.confinement.get("view_touched"))


def _left_out_doubt(exp: ExportReply) -> str | None:
    """Why a verdict is only likely when values the cell rebinds, whose freeing runs Python code, could not be
    copied (kernel/export's dry run): the cell's rebinding runs that code in the kernel (a `__del__` that removes a
    file, flushes one), never in the copy."""
    if not exp.finalizers_left_out:
        return None
    names = ", ".join(exp.finalizers_left_out[:3]) + (" and more" if len(exp.finalizers_left_out) > 3 else "")
    return (f"{names}, which the cell binds again, runs code when it is freed (a finalizer) and could not be "
            "copied: the kernel runs that code at the cell's rebinding, the copy did not")


# carried settings that turn a computation into an exception where the defaults do not (a `warnings` filter set to
# "error", a `decimal` trap, a lower int-digits limit): one not carried makes a clean run only likely. (Not numpy's:
# its key also carries print options, whose loss changes no outcome.)
_RAISING_SETTINGS = {"warnings": "its warnings filters", "decimal": "the decimal context's traps",
                     "interpreter": "the int-digits limit"}


def clean_doubt(source: str, missed: Collection[str], facts: dict | None = None) -> str | None:
    """Why a copy's clean run may not be the kernel's, else None: `state_doubt`, or a carried setting that can turn
    a computation into an exception which the worker could not take from the kernel (`_RAISING_SETTINGS`; red team
    round 18, G11: `warnings.simplefilter('error', DataWarning)` with a class of the notebook's was not carried, and
    the warning the kernel raises passed in the copy, a certain false clean run)."""
    held = state_doubt(source, missed, facts)
    if held is not None:
        return held
    lost = [what for key, what in _RAISING_SETTINGS.items() if key in missed]
    if lost:
        return (f"the kernel's state the copy could not take includes {lost[0]}: what the kernel raises there may "
                "pass in the copy")
    return None


_ID_CALL = re.compile(r"(?<![.\w])id\s*\(")  # the builtin `id(...)`, not `obj.id(...)` or `uid(...)`


def state_doubt(source: str, missed: Collection[str], facts: dict | None = None) -> str | None:
    """Why a copy run's crash or clean run may not be the kernel's because of state the worker holds otherwise
    (worker/main: `_hash_missed`, shared/own_modules.apply_own_modules), else None:
    - the cell calls `hash(` and the worker's string hashes are not the kernel's (`hash_differs`);
    - it iterates a copied set of strings (`str_set:<name>`) where the order shows (red team round 17h, F8): a set
      rebuilt in the worker iterates in another order than the kernel's, even with equal hashes (its slots depend
      on the order its items came in); or a notebook function it reaches reads one other than by `in`
      (`facts["reach_sets"]`, kernel/dynamic_reads);
    - it reads object ids (`id(`, in its text or a notebook function it reaches: red team round 18, G14): every
      copied object has another id in the worker;
    - it reads a process CPU clock (`time.process_time`, ...; sandbox/cpu_clock.py): the worker's, not the kernel's;
    - it reads one of the notebook's own modules whose worker copy is not the kernel's (`module:<name>`: its file
      changed since the kernel imported it, or it holds state the copy could not carry; round 17h, F2): the cell,
      or a notebook function it reaches (`facts["reach"]`: the names their code reads, kernel/dynamic_reads), names
      the module or a name the kernel's module holds (`facts["own_modules"]`);
    - it reads an attribute an earlier cell set on a library module or class that the copy could not take
      (`facts["attrs_lost"]`, kernel/library_attrs.py: `np.random.default_rng = partial(<the original>)`, whose
      function no longer pickles under its name; red team round 18, G19), or that the worker holds otherwise and
      may not replace (`libattr:<module>:<name>`, worker/main `_set_library_attrs`: `torch.load = my_load`)."""
    if "hash_differs" in missed and "hash(" in source:
        return "the worker's string hashes are not the kernel's (`hash()` of a string differs)"
    if reads_cpu_clock(source, (facts or {}).get("reach") or []):
        return CPU_CLOCK_REASON
    if _ID_CALL.search(source) or REACH_ID_CALL in ((facts or {}).get("reach") or []):
        return ("the cell (or a notebook function it calls) reads object ids (`id()`): the copy's objects have other "
                "ids than the kernel's (a dict keyed by `id(df)` misses them)")
    if "hash_differs" in missed and built_set_read(source):
        return ("the cell reads a set it builds in its iteration order, and the worker's string hashes are not the "
                "kernel's (a set of strings iterates in another order there)")
    names = {m.partition(":")[2] for m in missed if m.startswith("str_set:")}
    shown = ordered_set_reads(source, names) if names else []
    if shown:
        return (f"the cell iterates the set of strings {shown[0]!r} (a copied set iterates in the worker in another "
                "order than in the kernel)")
    helper_sets = [str(n) for n in (facts or {}).get("reach_sets") or []]
    if helper_sets:
        return (f"a notebook function the cell calls reads the set of strings {helper_sets[0]!r} other than by a "
                "membership test (a copied set iterates in the worker in another order than in the kernel)")
    reach = (facts or {}).get("reach") or []
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source)) | {w for w in reach if type(w) is str}
    lost = [str(a) for a in [*((facts or {}).get("attrs_lost") or []),
                             *(m.partition(":")[2] for m in missed if m.startswith("libattr:"))]
            if str(a).rpartition(":")[2] in words]
    if lost:
        owner, _, name = lost[0].rpartition(":")
        return (f"an earlier cell set {owner}.{name} in the kernel to a value the copy could not take (the copy's "
                "is the library's own)")
    own = (facts or {}).get("own_modules") or {}
    if not own:
        return None
    for name in (m.partition(":")[2] for m in missed if m.startswith("module:")):
        defined = (own.get(name) or {}).get("own") or []
        if words & {*name.split("."), *defined}:
            return (f"the notebook's module {name!r} in the copy is not the kernel's (its file changed since the "
                    "kernel imported it, or it could not be read or imported)")
    for name, entry in own.items():
        held = sorted(words & set((entry or {}).get("uncarried") or []))
        if held:
            return (f"the notebook's module {name!r} holds {held[0]!r}, a value the copy does not carry (only plain "
                    "data is): the copy's is what the module's file makes")
    return None


def _finalizers_missed(data: bytes) -> str | None:
    """What the worker's record says the copy did not run when the cell freed a copied object (its
    `confinement.finalizers_missed`, worker/finalizers.py), if anything."""
    from crane.sandbox.assemble import parse_lines

    rec = parse_lines(data).record
    why = rec.confinement.get("finalizers_missed") if rec is not None and isinstance(rec.confinement, dict) else None
    return str(why) if why else None


def _portable_layers(data: bytes) -> list[str]:
    """The layers a portable worker reports in its record (`confinement.layers`)."""
    from crane.sandbox.assemble import parse_lines

    rec = parse_lines(data).record
    layers = rec.confinement.get("layers") if rec is not None and isinstance(rec.confinement, dict) else None
    return [str(x) for x in layers] if isinstance(layers, list) else []


# exceptions whose cause is the process's environment (its C stack, memory, a library's integer width), not the
# cell's logic alone
# (not OverflowError: the worker runs the kernel's interpreter and libraries on the kernel's machine, so an
# overflow of the interpreter's or numpy's arithmetic (`math.exp(1000)`, numpy 2's `uint8_array * 257`) is the
# kernel's; one that rests on a rebuilt runtime's setting (JAX's x64 flag) is judged by its frames and names below)
_ENVIRONMENTAL = {"RecursionError", "MemoryError", "SystemError", "OSError", "ImportError", "ModuleNotFoundError"}
# Libraries whose behaviour rests on runtime state the worker rebuilds instead of receiving it: execution mode,
# compiled graphs and their caches, devices, and configuration beyond the values the export carries. Objects of
# the data libraries (numpy, pandas, scikit-learn, polars, ...) travel by their own pickling, whole, and their
# settings are carried; these runtimes' state does not travel that way.
REBUILT_RUNTIMES = frozenset({"tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax", "optax", "torch", "cupy",
                              "numba", "triton"})


def _runtime_of(where: str) -> str | None:
    """The rebuilt runtime a traceback frame's file or a copied value's type belongs to, if any."""
    parts = where.replace("\\", "/").replace(".", "/").split("/")
    return next((p for p in parts if p in REBUILT_RUNTIMES), None)


def crash_certain(v: SandboxVerdict, source: str, copied: list[tuple[str, str]],
                  carried: Collection[str] = (), missed: Collection[str] = (), patched: Collection[str] = ()) -> bool:
    """Whether a transplant crash is certain (`crash_doubt` says why it is not)."""
    return crash_doubt(v, source, copied, carried, missed, patched) is None


def crash_doubt(v: SandboxVerdict, source: str, copied: list[tuple[str, str]],
                carried: Collection[str] = (), missed: Collection[str] = (), patched: Collection[str] = ()) -> str | None:
    """Why a transplant crash is only "likely", in words (None: it is certain; `SandboxVerdict.reason` says it,
    and `crane fix`, the agent and `crane_fixes` repeat it). A crash is certain only when its failing frames cannot
    depend on library state the worker rebuilt: not an environmental exception (the recursion limit, memory, the OS), no frame in a rebuilt
    runtime (`REBUILT_RUNTIMES`: TensorFlow/Keras, JAX, torch, ...), and no value of one read on the failing line.
    A runtime in `carried` is not rebuilt: the copy holds its state, applied and compared equal in the worker
    (torch on the CPU; JAX's config; TensorFlow's and Keras' settings when none of their objects was copied).
    `missed`: carried state (shared/carry.py's keys) the worker could not prove equal to the kernel's: a crash that
    may rest on it is "likely" (`_MISSED_STATE`). `patched`: library classes of copied values the notebook added
    to or changed (the copy's class is the library's own): an AttributeError naming one is "likely". So is a
    missing process (the kernel's pids are not the worker's). Otherwise it is "likely": it never decides alone
    (crane.policy)."""
    ename, evalue = v.ename or "", v.evalue or ""
    if ename in _ENVIRONMENTAL:
        return f"{ename} rests on the process's environment (its stack, memory, the OS), which the copy's is not"
    if ename in _PROCESS_LOOKUP:
        return "the kernel's processes are not the copy's (a pid the notebook recorded is not found there)"
    if ename == "AttributeError":
        for name in patched:
            if f"'{name}' object has no attribute" in evalue or f"type object '{name}' has no attribute" in evalue:
                return f"the notebook patched the library class {name} beyond what the copy carries"
    frames = [t for t in v.traceback[:-1] if t.strip() and not t.startswith("cell")]
    for key, rests in _MISSED_STATE.items():
        if key in missed and rests(v, source, frames):
            what = _MISSED_WORDS.get(key) or f"the kernel's {key} state"
            return f"the copy could not prove {what} equal to the kernel's"

    def rebuilt(where: str) -> str | None:
        runtime = _runtime_of(where)
        return runtime if runtime is not None and runtime not in carried else None

    for t in frames:
        if runtime := rebuilt(t.split(":", 1)[0]):
            return f"its failing frame is in {runtime}, whose library state the copy rebuilt"
    lines = source.splitlines()
    if not v.line or v.line > len(lines):
        return "the failing line is not one of the cell's"
    kinds = dict(copied)
    for name in cell_names(lines[v.line - 1].strip()):
        if runtime := rebuilt(kinds.get(name) or ""):
            return f"`{name}` on the failing line holds a {runtime} value the copy rebuilt"
    return None


_PROCESS_LOOKUP = {"ProcessLookupError", "NoSuchProcess", "ZombieProcess"}  # a pid of the kernel's is not the worker's
_DECIMAL_SIGNALS = {"DecimalException", "Clamped", "DivisionByZero", "Inexact", "Overflow", "Rounded", "Subnormal",
                    "Underflow", "InvalidOperation", "FloatOperation", "DivisionImpossible", "DivisionUndefined",
                    "InvalidContext", "ConversionSyntax"}


def _in_frames(frames: list[str], *libs: str) -> bool:
    return any(lib in t.split(":", 1)[0].replace("\\", "/").replace(".", "/").split("/") for t in frames for lib in libs)


# carried state (shared/carry.py's keys) in words, for a likely crash's reason (`crash_doubt`)
_MISSED_WORDS = {"warnings": "the warnings filters", "decimal": "the decimal context", "interpreter":
                 "the interpreter's settings (int digits)", "numpy": "numpy's settings", "pandas": "pandas' options",
                 "sklearn": "scikit-learn's configuration", "matplotlib": "matplotlib's rcParams",
                 "random": "the random module's state", "numpy_random": "numpy's global random state",
                 "tf": "TensorFlow's random state", "ast_transformers": "the notebook's AST transformers",
                 "input_transformers": "the notebook's input transformers",
                 "shell_settings": "the shell's settings", "logging": "the loggers' settings",
                 "socket": "the default socket timeout", "process": "the process's file-mode mask",
                 "builtins": "the values the notebook put in the builtins"}
# a cell's reads of loggers (`logging.`, `getLogger`, `log.info(`, `logger.`) and of file modes (`umask`, `st_mode`)
_LOGGING_READ = re.compile(r"\blogging\b|\bgetLogger\b|\b(?:log|logger|_log|LOG|LOGGER)\s*\.")
_FILE_MODE_READ = re.compile(r"\bumask\b|\bst_mode\b|\bS_IMODE\b|\bchmod\b|\bfilemode\b")
# carried state (shared/carry.py's keys) -> does this crash possibly rest on it (when it was not proven equal)
_MISSED_STATE = {
    "warnings": lambda v, source, frames: (v.ename or "").endswith("Warning"),
    "decimal": lambda v, source, frames: (v.ename or "") in _DECIMAL_SIGNALS or _in_frames(frames, "decimal",
                                                                                             "_pydecimal"),
    "interpreter": lambda v, source, frames: (v.ename or "") == "ValueError" and "digits" in (v.evalue or ""),
    "numpy": lambda v, source, frames: (v.ename or "") == "FloatingPointError" or _in_frames(frames, "numpy"),
    "pandas": lambda v, source, frames: _in_frames(frames, "pandas"),

    "sklearn": lambda v, source, frames: _in_frames(frames, "sklearn"),
    # (a figure's files, sizes and colours: the cell's own checks of them fail in no matplotlib frame)
    "matplotlib": lambda v, source, frames: _in_frames(frames, "matplotlib") or "matplotlib" in source
    or "plt." in source,
    "random": lambda v, source, frames: "random" in source,
    "numpy_random": lambda v, source, frames: "random" in source,
    "tf": lambda v, source, frames: "random" in source,  # (its seed, op-seed generator, global tf.random.Generator)
    "logging": lambda v, source, frames: _in_frames(frames, "logging") or _LOGGING_READ.search(source) is not None,
    "socket": lambda v, source, frames: (v.ename or "") in ("TimeoutError", "timeout") or _in_frames(frames, "socket"),
    "process": lambda v, source, frames: _FILE_MODE_READ.search(source) is not None,
    "builtins": lambda v, source, frames: (v.ename or "") == "NameError",
    # the notebook's shell state the worker lacks (`shell_missed`): transformers that rewrite every cell (a name they
    # define, a call they wrap) and were not copied, the shell's settings (interactivity, `__future__` flags, formats, autoawait) when their dicts held a key that is
    # not an exact str (kernel/environment._shell_settings: not read, the worker has IPython's defaults)
    **{key: (lambda v, source, frames: True) for key in ("ast_transformers", "input_transformers", "shell_settings")},
}
SHELL_STATE = ("ast_transformers", "input_transformers", "shell_settings")


def shell_missed(facts: dict) -> list[str]:
    """The notebook's shell state a crash in the copy may rest on that the worker did not hold (issue 42, h1):
    env.json's `shell_missed` (cell transformers an earlier cell registered that could not be copied:
    kernel/transformers.py). A name a copied transformer made the cell read, never copied, is `_uncopied_name`'s
    case (a NameError of a kernel name the copy did not hold, whatever made the cell read it)."""
    return [str(m) for m in facts.get("shell_missed") or [] if m in SHELL_STATE]


# code that reads the notebook's namespace as a mapping (`globals()['x']`, `get_ipython().user_ns`, `ip.user_ns`,
# `vars()`, a module's `__dict__`): a KeyError there may name a kernel name the copy did not hold
_NAMESPACE_AS_MAPPING = re.compile(r"(?<![.\w])(?:globals|vars|locals)\s*\(|\buser_(?:global_)?ns\b|\b__dict__\b|"
                                   r"\bf_globals\b")
# code that may read the notebook's namespace as a whole (iterate it, count it, look a computed key up): what it
# finds depends on names the cell never names, which the copy carries only where the cell names them somewhere
# (cell_names: as code, or in a string constant)
_NAMESPACE_AS_WHOLE = re.compile(r"(?<![.\w])(?:globals|vars|locals|dir)\s*\(\s*\)|\buser_(?:global_)?ns\b|"
                                 r"(?<![\'\"])\b__main__\b(?![\'\"])|\bf_globals\b|"
                                 r"\bmodules\s*\[\s*['\"]__main__|\bwho_ls\b|^\s*%{1,2}whos?\b", re.M)
# the names every IPython shell's namespace holds (the worker's too): never missing from a copy
_SHELL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})


def _uncopied_name(v: SandboxVerdict, source: str, facts: dict, held: Collection[str]) -> str | None:
    """The kernel's name a copy's crash says is missing though the kernel holds it (the copy carries the names the
    cell reads by name, and what they reach): a NameError for it (`eval(name)`, a name a copied cell transformer
    made the cell read), or, where the cell reads the namespace as a mapping, a KeyError of it (`globals()[k]`).
    None otherwise (an honest KeyError of a dict's)."""
    name = _missing_name(v)
    if name is None or name not in _uncopied(facts, held):
        return None
    if v.ename in ("NameError", "AttributeError") or _NAMESPACE_AS_MAPPING.search(source) \
            or facts.get("dynamic_readers"):
        return name
    return None


def _missing_name(v: SandboxVerdict) -> str | None:
    """The name a crash says is missing: a NameError's, a KeyError's key where it is a plain string, or the
    attribute an AttributeError says the notebook's module `__main__` lacks (`import __main__` in a function or a
    module of the notebook's reading `__main__.x`: round 16 follow-up, F3)."""
    if v.ename == "NameError":
        m = re.search(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined", v.evalue or "")
    elif v.ename == "AttributeError":
        m = re.match(r"module '__main__' has no attribute '([A-Za-z_][A-Za-z0-9_]*)'", v.evalue or "")
    elif v.ename == "KeyError":
        m = re.fullmatch(r"'([^'\\]*)'", v.evalue or "")
    else:
        return None
    return m.group(1) if m else None


def _uncopied(facts: dict, held: Collection[str]) -> set[str]:
    """The kernel's names (env.json's `names`: those not starting with `_`) the copy did not hold."""
    names = facts.get("names")
    return set(names) - set(held) - _SHELL_NAMES if isinstance(names, list) else set()


# IPython's magics that read the shell's input history (by line ranges, or the last input)
_HISTORY_NAMES = "rerun|recall|rep|hist|history|macro|save|edit|pastebin"
_HISTORY_MAGIC = re.compile(rf"^\s*%{{1,2}}(?:{_HISTORY_NAMES})\b|\brun_line_magic\(\s*['\"](?:{_HISTORY_NAMES})['\"]", re.M)


def history_doubt(source: str) -> str | None:
    """Why a copy's verdict on `source` is only likely when the cell reads the kernel's input history (`%rerun`,
    `%history`, `%macro`, `%save` of earlier lines: round 16, F4): the copy's shell records none (its `In`/`_ih`
    are plain copies where the cell names them), so `%rerun` of a cell that raises ran clean and `%macro` of an
    earlier line failed. None otherwise."""
    if _HISTORY_MAGIC.search(source) is None:
        return None
    return "the cell reads the kernel's input history (%rerun, %history, %macro, %save, ...), which the copy's shell " \
           "does not hold"


def _magic_not_found(v: SandboxVerdict) -> str | None:
    """The magic a copy's UsageError says it lacks (`%shout`, `%%sql`), else None: the worker's shell holds IPython's
    own magics only, not those the notebook registered (`@register_line_magic`), an extension added (`%load_ext
    autoreload`: `%aimport`), or `%alias_magic` made (round 16, F3: a certain false UsageError)."""
    if v.ename != "UsageError":
        return None
    m = re.match(r"(?:Line magic function|Cell magic(?: function)?) `(%{1,2}[\w.]+)` not found", v.evalue or "")
    return m.group(1) if m else None


def _namespace_unseen(v: SandboxVerdict, source: str, facts: dict, held: Collection[str]) -> list[str]:
    """Where the cell, or a notebook function the copy carried (env.json's `dynamic_readers`:
    kernel/dynamic_reads.py), may read the namespace as a whole (`for k in globals()`, `vars()[computed]`, `len(user_ns)`),
    the kernel's names the copy did not hold (sorted): what such a cell saw in the copy is not what it sees in the
    kernel, so a crash there is only likely. [] for a KeyError of a name the kernel does not hold either, raised by
    the namespace itself (the kernel raises it too: `ip.user_ns['no_such_name']`, `_indexes_namespace`)."""
    if not _NAMESPACE_AS_WHOLE.search(source) and not facts.get("dynamic_readers"):
        return []
    missing = _uncopied(facts, held)
    name = _missing_name(v)
    names = facts.get("names")
    if missing and name is not None and isinstance(names, list) and name not in names \
            and _indexes_namespace(source, v.line, name):
        return []
    return sorted(missing)


def _indexes_namespace(source: str, line: int | None, name: str) -> bool:
    """The failing `line` of `source` indexes the namespace itself with `name` as a literal (`globals()['x']`,
    `ip.user_ns.pop('x')`): a KeyError there of a name the kernel does not hold is the kernel's too. A key computed
    from the namespace's names (`{k[4:]: v for k, v in globals().items()}['lr']`: round 16, F6) or a NameError of a
    name an `exec` of them would have bound is not: what the copy lacked may be what made it missing."""
    lines = source.splitlines()
    if not line or line > len(lines):
        return False
    quoted = rf"(['\"]){re.escape(name)}\1"
    return re.search(rf"(?:(?<![.\w])(?:globals|vars|locals)\s*\(\s*\)|\buser_(?:global_)?ns|\b__dict__)\s*"
                     rf"(?:\[\s*{quoted}\s*\]|\.pop\s*\(\s*{quoted})", lines[line - 1]) is not None


class CopyFacts(msgspec.Struct):
    """What a crash in a copy is judged by (`copy_crash_certain`), as one worker holds it: a one-shot run's from its
    export and its worker's setup line, a session's gathered over its worker's exports and loads
    (crane.sandbox.transplant_session)."""
    copied: list[tuple[str, str]] = []  # (name, type) of every value the worker holds from the kernel
    carried: list[str] = []  # rebuilt runtimes whose state the copy carries (ExportReply.carried)
    patched: list[str] = []  # library classes of copied values the notebook patched beyond the copy (ExportReply)
    traced: list[str] = []  # copied Keras models the kernel traced: the copy's are rebuilt untraced (ExportReply)
    settings_missed: list[str] = []  # carried state the worker could not prove equal (its setup line / load replies)


def copy_crash_certain(v: SandboxVerdict, source: str, held: CopyFacts, facts: dict) -> bool:
    """Whether a crash on a copy path (one-shot or session, OS transplant or portable) is certain: one rule for both
    (issue 42, h9). `held`: what the worker holds; `facts`: the kernel's env.json of the (last) export, for the shell
    state the worker misses (`shell_missed`). The runtimes whose carried state was missed are rebuilt again."""
    return copy_crash_doubt(v, source, held, facts) is None


_NO_ATTRIBUTE = re.compile(r"^(?:module '([\w.]+)'|'(\w+)' object|type object '(\w+)') has no attribute '(\w+)'")


def _library_attr_lacking(v: SandboxVerdict, facts: dict, patched: Collection[str] = ()) -> str | None:
    """An AttributeError in the copy naming an attribute the kernel's library module or class holds (env.json's
    `attrs_held`, kernel/library_attrs.py: what an earlier cell put there, `np.float = float`, `tqdm.pandas()`, that
    the copy could not set on the worker's): the kernel has it (red team round 18, G2, G19)."""
    if (v.ename or "") != "AttributeError":
        return None
    m = _NO_ATTRIBUTE.match(v.evalue or "")
    if m is None:
        return None
    owner = m.group(1) or m.group(2) or m.group(3)
    if owner in patched:  # (crash_doubt says it: the notebook patched that library class beyond what is carried)
        return None
    if f"{owner}:{m.group(4)}" not in set(facts.get("attrs_held") or []):
        return None
    return (f"the kernel's {owner} has the attribute {m.group(4)!r} (an earlier cell put it there) and the copy's "
            "could not take it")


def copy_crash_doubt(v: SandboxVerdict, source: str, held: CopyFacts, facts: dict) -> str | None:
    """Why a crash on a copy path is only likely (None: certain), by `copy_crash_certain`'s rule."""
    missed = [*held.settings_missed, *shell_missed(facts)]
    copied = [n for n, _ in held.copied]
    name = _uncopied_name(v, source, facts, copied)
    if name is not None:
        return f"the cell reads the kernel's name {name!r} indirectly (not by its name: eval, globals(), the shell's " \
               "user_ns), and the copy did not hold it"
    if v.ename == "NameError" and (gone := _missing_name(v)) in (facts.get("builtins_lost") or []):
        return f"the kernel's builtins hold {gone!r} (an earlier cell put it there), which the copy could not take"
    history = history_doubt(source)
    if history is not None:
        return history
    magic = _magic_not_found(v)
    if magic is not None:
        return f"the magic {magic} is not the copy's: the kernel's shell may hold it (a magic the notebook registered " \
               "or an extension loaded: the copy's shell has IPython's own)"
    unseen = _namespace_unseen(v, source, facts, copied)
    if unseen:
        shown = ", ".join(unseen[:5]) + (f" and {len(unseen) - 5} more" if len(unseen) > 5 else "")
        return f"the cell reads the kernel's namespace as a whole (globals(), vars(), the shell's user_ns), and the " \
               f"copy held only the names the cell names, not {shown}"
    held_otherwise = state_doubt(source, missed, facts)
    if held_otherwise is not None:
        return held_otherwise
    lacking = _library_attr_lacking(v, facts, held.patched)
    if lacking is not None:
        return lacking
    lines = source.splitlines()
    line = lines[v.line - 1].strip() if v.line and v.line <= len(lines) else ""
    calls = {_TRACED_FUNCTION[m.group(1)] for m in _TRACED_CALL.finditer(line)} \
        if (v.ename or "") in _TRACED_ERRORS else set()
    names = set(cell_names(line))
    reach = [w for w in facts.get("reach") or [] if type(w) is str]
    if (v.ename or "") in _TRACED_ERRORS and reach and any(
            m.group(1) not in _BUILTIN_NAMES for m in _CALLS_SOMETHING.finditer(line)):
        # a notebook function the line calls may run the call (`train(model, X)`): what the functions the cell
        # reaches call and read counts (kernel/dynamic_reads `reach`)
        calls |= {_TRACED_FUNCTION[w] for w in reach if w in _TRACED_FUNCTION}
        names |= set(reach)
    traced = [n for n, _, fn in (t.partition(":") for t in held.traced) if fn in calls and n in names]
    if traced:
        return (f"the kernel's Keras model {traced[0]!r} has traced the function this call runs and the copy's, "
                "rebuilt, has not: the kernel may fail in its traced graph with another exception")
    lost = {r for m in missed for r in CARRIED_RUNTIMES.get(m, (m,))}
    return crash_doubt(v, source, held.copied, [r for r in held.carried if r not in lost], missed=missed,
                       patched=held.patched)


# a Keras model's traced functions: the calls that run them, and what their graph or the rebuilt model's input
# checks raise (an AttributeError, a TypeError of the call itself, is raised before either: the kernel's own)
_TRACED_CALL = re.compile(r"\.(fit|evaluate|predict|train_on_batch|test_on_batch|predict_on_batch)\s*\(")
_CALLS_SOMETHING = re.compile(r"(?<![.\w])([A-Za-z_]\w*)\s*\(")  # a call of a name (a function of the notebook's?)
_BUILTIN_NAMES = frozenset(dir(builtins))  # (`int(`, `print(`: not a notebook function)
_TRACED_FUNCTION = {"fit": "train", "train_on_batch": "train", "evaluate": "test", "test_on_batch": "test",
                    "predict": "predict", "predict_on_batch": "predict"}  # (the call -> the function it runs)
_TRACED_ERRORS = frozenset(("ValueError", "InvalidArgumentError", "UnimplementedError", "FailedPreconditionError",
                            "ResourceExhaustedError", "InternalError", "OutOfRangeError", "UnknownError",
                            "XlaRuntimeError"))
LIKELY_CRASH = "the crash is only likely"  # the head of a likely crash's `reason` (then ": " and why)


def likely_reason(reason: str | None, doubt: str) -> str:
    """A likely crash's `reason`: what the run said of its end, if anything (e.g. "the sandbox process exited
    (5)", as the fork path says it), then why the crash is only likely."""
    return f"{reason} ({LIKELY_CRASH}: {doubt})" if reason else f"{LIKELY_CRASH}: {doubt}"


def _setup_transplant(data: bytes) -> dict:
    for raw in data.split(b"\n"):
        if b'"transplant"' in raw and b'"setup"' in raw:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("transplant"), dict):
                return obj["transplant"]
    return {}

"""Where the portable sandbox runs and what it asks of the platform (crane.sandbox.portable): auto chooses it
wherever the OS sandbox cannot run (macOS, Windows, Linux on ARM, ...), `--sandbox portable` everywhere, `os`
never (the OS layer under the worker, per platform: tests/sandbox/test_oslayer_*.py); the worker's portable path
uses no FIFO of its own, no pidfd and no /proc. Run on every platform of the CI matrix (marker portable_platform)."""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from pathlib import Path

import pytest

from crane.sandbox import confinement, portable
from crane.sandbox.options import SandboxOptions, add_sandbox_arguments, options_from_args

WORKER = Path(portable.__file__).resolve().parent / "worker"
pytestmark = pytest.mark.portable_platform


@pytest.mark.parametrize(("system", "machine_ok"), [("darwin", False), ("win32", False), ("freebsd14", False)])
def test_auto_runs_the_portable_sandbox_where_the_os_one_cannot(system, machine_ok):
    other = confinement.for_platform(system)
    which, why = portable.choose("auto", other)
    assert which == "portable" and why is not None and why.startswith(other.unavailable() or "?")
    assert portable.choose("os", other) == ("os", None)  # the OS sandbox's own `unavailable` then stands
    assert portable.choose("portable", other) == ("portable", portable.ASKED)


def test_auto_keeps_the_os_sandbox_where_it_runs():
    class Here(confinement.Confinement):
        def unavailable(self):
            return None

    assert portable.choose("auto", Here()) == ("os", None)
    assert portable.choose("portable", Here()) == ("portable", portable.ASKED)


def test_linux_on_arm_gets_the_portable_sandbox(monkeypatch):
    monkeypatch.setattr(confinement.platform, "machine", lambda: "aarch64")
    which, why = portable.choose("auto", confinement.Linux())
    assert which == "portable" and "aarch64" in (why or "")


def test_the_flag_resolves_once_into_the_options():
    p = argparse.ArgumentParser()
    add_sandbox_arguments(p)
    assert options_from_args(p.parse_args([])) == SandboxOptions(confinement="auto")
    assert options_from_args(p.parse_args(["--sandbox", "portable"])) == SandboxOptions(confinement="portable")
    with pytest.raises(SystemExit):
        p.parse_args(["--sandbox", "none"])


def test_the_portable_path_uses_no_linux_only_calls():
    """No FIFO of its own, no pidfd, no /proc, no prctl on the worker's portable path (the daemon's FIFO is opened
    as a path, whatever it is)."""
    for name in ("guard.py", "portable.py"):
        text = (WORKER / name).read_text(encoding="utf-8")
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        body = code.split('"""', 2)[2]  # past the module docstring
        # a descriptor's path: F_GETPATH on macOS/BSD first, Linux's /proc/self/fd only where fcntl lacks it
        body = re.sub(r'    return os\.readlink\(f"/proc/self/fd/\{fd\}"\)  # \(Linux\)', "", body)
        banned = re.findall(r"/proc/|\bos\.(?:mkfifo|pidfd_open|unshare|sched_\w+)\(|signal\.pidfd_send_signal|"
                            r"prctl\(|setrlimit\(|landlock|seccomp|CLONE_NEW", body)
        assert banned == [], (name, banned)


def test_auto_falls_back_to_the_portable_sandbox_when_the_machine_refuses_the_os_confinement():
    from crane.sandbox.verdict import SandboxVerdict

    refused = SandboxVerdict(verdict="unavailable", reason="sandbox setup failed: seccomp filter: [Errno 22] EINVAL")
    why = portable.os_refused(refused) or ""
    assert why.startswith("the OS sandbox could not be set up here (sandbox setup failed: seccomp")
    worker = SandboxVerdict(verdict="unavailable", reason="the sandbox child failed during setup")
    assert portable.os_refused(worker)
    for other in (SandboxVerdict(verdict="unavailable", reason="the kernel is busy"),
                  SandboxVerdict(verdict="blocked", reason="sandbox setup failed"),
                  SandboxVerdict(verdict="crash", ename="KeyError")):
        assert portable.os_refused(other) is None


# -- the daemon's side of the portable path (crane.sandbox.pipes) and the worker's limits ---------------------------
SANDBOX = Path(portable.__file__).resolve().parent
# calls that exist on Linux (or POSIX) only, or that the portable path must not make: FIFOs, pidfds, /proc, fork,
# `select.poll`, UNIX sockets, the OS sandbox's FIFO channel and its pid-start-time checks
LINUX_ONLY_CALLS = {"os.mkfifo", "os.pidfd_open", "signal.pidfd_send_signal", "os.fork", "os.forkpty", "select.poll",
                    "os.pipe2", "socket.send_fds", "socket.recv_fds", "fcntl.fcntl"}
OS_CHANNEL = {"PrivateDir", "ChildHandle", "read_until_eof", "kernel_ref", "_starttime", "RunDrain",
              "_own_pid_namespace"}
# the functions of the shared files that the portable path runs; what they call on the OS path must sit in the
# branch where `portable` is false
SHARED_PORTABLE_PATH = {"transplant.py": ("transplant", "kernel_of", "Worker.run", "Worker.__init__", "Worker.end"),
                        "transplant_session.py": ("TransplantSession.start", "TransplantSession._start_worker",
                                                  "TransplantSession._write_command",
                                                  "TransplantSession._read_chunk", "TransplantSession.run")}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _mentions_portable(test: ast.AST) -> bool | None:
    """True: the branch's test is `portable` (its body is the portable path); False: `not portable`; None: other."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _mentions_portable(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Call) and _dotted(test.func) == "bool" and test.args:
        return _mentions_portable(test.args[0])
    return True if _dotted(test).split(".")[-1] == "portable" else None


def _banned_calls(tree: ast.AST, banned: set[str], os_only: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Calls to `banned` anywhere, and to `os_only` outside a branch where `portable` is false."""
    found: list[str] = []

    def visit(node: ast.AST, os_branch: bool) -> None:
        if isinstance(node, (ast.If, ast.IfExp)):
            which = _mentions_portable(node.test)
            visit(node.test, os_branch)
            body: list[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
            orelse: list[ast.AST] = list(node.orelse) if isinstance(node.orelse, list) else [node.orelse]
            for sub in body:
                visit(sub, os_branch or which is False)
            for sub in orelse:
                visit(sub, os_branch or which is True)
            return
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in banned or name.split(".")[-1] in banned:
                found.append(f"{name} (line {node.lineno})")
            elif name.split(".")[-1] in os_only and not os_branch:
                found.append(f"{name} (line {node.lineno}, not in the OS branch)")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/proc"):
            found.append(f"{node.value!r} (line {node.lineno})")
        for child in ast.iter_child_nodes(node):
            visit(child, os_branch)

    visit(tree, False)
    return found


def _functions(tree: ast.Module, names: tuple[str, ...]) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = sub
    missing = [n for n in names if n not in out]
    assert not missing, missing
    return {n: out[n] for n in names}


def test_the_daemons_portable_path_uses_no_linux_only_calls():
    """The daemon's side of the portable path: its own modules make no Linux-only call at all (no FIFO, pidfd,
    /proc, fork, poll, UNIX socket); in the shared transplant modules, the OS sandbox's FIFO channel, pidfd
    handles and /proc start times are reached only in the branch where the run is not portable."""
    for name in ("pipes.py", "portable.py", "process_watch.py"):
        tree = ast.parse((SANDBOX / name).read_text(encoding="utf-8"))
        assert _banned_calls(tree, LINUX_ONLY_CALLS | OS_CHANNEL | {"socket.socket", "socket.socketpair"}) == [], name
    for name, funcs in SHARED_PORTABLE_PATH.items():
        tree = ast.parse((SANDBOX / name).read_text(encoding="utf-8"))
        for fname, fnode in _functions(tree, funcs).items():
            assert _banned_calls(fnode, LINUX_ONLY_CALLS, OS_CHANNEL) == [], (name, fname)


def test_the_worker_asks_the_platform_for_the_machines_memory_without_proc():
    """What the worker's run reaches on the portable path to tell an allocation larger than the machine
    (kernel/run._classify): no /proc read, no Linux-only call; the OS sandbox keeps /proc/meminfo. On Linux both
    give the same figure (memory plus swap)."""
    from crane.sandbox.kernel import isolation

    tree = ast.parse((SANDBOX / "kernel" / "isolation.py").read_text(encoding="utf-8"))
    (fnode,) = _functions(tree, ("_portable_memory_bytes",)).values()
    assert _banned_calls(fnode, LINUX_ONLY_CALLS | OS_CHANNEL | {"proc_kb", "open"}) == []
    run = ast.parse((SANDBOX / "kernel" / "run.py").read_text(encoding="utf-8"))
    (classify,) = _functions(run, ("_classify",)).values()
    calls = [n for n in ast.walk(classify) if isinstance(n, ast.Call) and _dotted(n.func) == "_machine_memory_bytes"]
    assert calls and all(any(k.arg == "portable" for k in c.keywords) for c in calls)
    assert isolation._portable_memory_bytes() > 0 or sys.platform == "darwin"
    if sys.platform.startswith("linux"):
        assert isolation._portable_memory_bytes() == isolation._machine_memory_bytes()


def test_the_workers_limits_use_no_linux_only_calls():
    tree = ast.parse((WORKER / "limits.py").read_text(encoding="utf-8"))
    assert _banned_calls(tree, LINUX_ONLY_CALLS | OS_CHANNEL | {"prctl"}) == []


def test_the_ast_check_sees_a_fifo_on_the_portable_path():
    """The check itself: a FIFO or a pidfd outside the OS branch is found, inside it is not."""
    bad = ast.parse("def transplant(portable):\n    pdir = PrivateDir()\n    os.mkfifo('x')\n")
    assert len(_banned_calls(bad, LINUX_ONLY_CALLS, OS_CHANNEL)) == 2
    good = ast.parse("def transplant(portable):\n    pdir = PortableDir() if portable else PrivateDir()\n"
                     "    if not portable:\n        h = ChildHandle(1, 2)\n")
    assert _banned_calls(good, LINUX_ONLY_CALLS, OS_CHANNEL) == []


def test_the_memory_budget_is_tied_to_the_machine():
    from crane.sandbox.worker import limits

    gib = 1 << 30
    assert limits.memory_budget_bytes(2048, 64 * gib) == 2 * gib  # asked for, where the machine has room
    assert limits.memory_budget_bytes(8192, 8 * gib) == 4 * gib  # at most half the machine (or cgroup)
    assert limits.memory_budget_bytes(1, 0) == 256 * limits.MIB  # a floor; unknown machine: as asked
    assert limits.machine_memory_bytes() > 0


def test_the_windows_job_objects_limits():
    """Built on any platform (ctypes structures), applied on Windows only: committed memory per process, user time
    in 100 ns units, the worker ended with the job."""
    import ctypes

    from crane.sandbox.worker import limits

    info = limits.windows_job_limits(3 << 30, 12.5)
    flags = info.BasicLimitInformation.LimitFlags
    assert flags & limits.JOB_OBJECT_LIMIT_PROCESS_MEMORY and flags & limits.JOB_OBJECT_LIMIT_PROCESS_TIME
    assert flags & limits.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    assert info.ProcessMemoryLimit == 3 << 30 and info.BasicLimitInformation.PerProcessUserTimeLimit == 125_000_000
    # JOBOBJECT_EXTENDED_LIMIT_INFORMATION's layout on 64-bit Windows (winnt.h): 144 bytes
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert ctypes.sizeof(limits.ExtendedLimitInformation) == 144


def test_the_posix_limits_turn_a_large_allocation_into_a_memory_error(tmp_path):
    """In a fresh interpreter: after `set_run_limits(256 MiB)` an allocation of 4 GiB fails with MemoryError (it
    succeeds lazily without the limit), and the CPU-time and file-size limits are set."""
    import subprocess
    import sys

    if not hasattr(os, "fork"):
        pytest.skip("POSIX rlimits")
    code = ("import json, sys, resource\n"
            f"sys.path.insert(0, {str(SANDBOX.parent.parent)!r})\n"
            "from crane.sandbox.worker.limits import set_run_limits\n"
            "import numpy as np\n"
            "a = np.zeros(1 << 32, dtype=np.uint8); del a\n"  # lazily mapped: fine without the limit
            "out = set_run_limits(256, 5.0, 64)\n"
            "try:\n    b = np.zeros(1 << 32, dtype=np.uint8)\n    r = 'allocated'\n"
            "except MemoryError:\n    r = 'MemoryError'\n"
            "print(json.dumps({'r': r, 'limits': out}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["r"] == "MemoryError", got
    lim = got["limits"]
    assert lim["memory_budget_mb"] == 256 and "failed" not in lim
    assert {"RLIMIT_CPU", "RLIMIT_FSIZE"} <= set(lim) and ("RLIMIT_DATA" in lim or "RLIMIT_AS" in lim)

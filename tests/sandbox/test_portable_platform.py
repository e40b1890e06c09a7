"""Where the portable sandbox runs and what it asks of the platform (crane.sandbox.portable): auto chooses it
wherever the OS sandbox cannot run (macOS, Windows, Linux on ARM, ...), `--sandbox portable` everywhere, `os`
never; on macOS the worker starts under `/usr/bin/sandbox-exec -p PROFILE` when a trial start succeeds (tested as
text: it cannot run here); the worker's portable path uses no FIFO of its own, no pidfd and no /proc."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from crane.sandbox import confinement, portable
from crane.sandbox.options import SandboxOptions, add_sandbox_arguments, options_from_args

WORKER = Path(portable.__file__).resolve().parent / "worker"


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


def test_the_seatbelt_profile_denies_writes_outside_the_runs_folders_and_all_network():
    text = portable.seatbelt_profile("/private/var/folders/ab/T")
    lines = [ln.strip() for ln in text.splitlines()]
    assert lines[0] == "(version 1)"
    for rule in ("(deny network*)", "(deny file-write*)", "(deny process-fork)"):
        assert rule in lines
    assert text.index("(deny file-write*)") < text.index("(allow file-write*")  # the later rule wins in SBPL
    m = re.search(r'\(regex #"([^"]+)"\)', text)
    assert m is not None
    pattern = m.group(1).replace("\\\\", "\\")
    assert re.match(pattern, "/private/var/folders/ab/T/crane-sbx-x1y2/cwd/out.csv")
    assert re.match(pattern, "/private/var/folders/ab/T/crane-tw-abc/log")
    assert not re.match(pattern, "/private/var/folders/ab/T/other/out.csv")
    assert not re.match(pattern, "/Users/me/data.csv")
    assert text.count("(") == text.count(")")


def test_the_worker_command_line_under_sandbox_exec():
    argv = ["/usr/bin/python3", "-c", "print(1)"]
    wrapped, layers = portable.worker_argv(argv, platform="darwin", exists=lambda p: p == portable.SANDBOX_EXEC,
                                           trial=lambda cmd: 0)
    assert wrapped[:2] == ["/usr/bin/sandbox-exec", "-p"] and wrapped[3:] == argv and layers == ["sandbox-exec"]
    assert "(deny network*)" in wrapped[2]
    # the binary missing, or a trial start that fails: the guarded run goes on without it, no layer claimed
    assert portable.worker_argv(argv, platform="darwin", exists=lambda p: False) == (argv, [])
    assert portable.worker_argv(argv, platform="darwin", exists=lambda p: True, trial=lambda cmd: 71) == (argv, [])
    assert portable.worker_argv(argv, platform="linux") == (argv, [])
    assert portable.worker_argv(argv, platform="win32") == (argv, [])


def test_the_portable_path_uses_no_linux_only_calls():
    """No FIFO of its own, no pidfd, no /proc, no prctl on the worker's portable path (the daemon's FIFO is opened
    as a path, whatever it is)."""
    for name in ("guard.py", "portable.py"):
        text = (WORKER / name).read_text(encoding="utf-8")
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        body = code.split('"""', 2)[2]  # past the module docstring
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

"""macOS OS layer (daemon side): a portable worker started under `/usr/bin/sandbox-exec -p PROFILE`.

`seatbelt_profile(...)` is the Seatbelt profile: everything the interpreter needs is allowed (`allow default`:
profiles that start from `deny default` abort Python's startup in ways that cannot be seen from outside), then
the attack families of the portable sandbox are denied, each with a rule SBPL resolves last-match-wins:
- network of every kind: `network*` (outbound, inbound, bind), UNIX domain sockets included (a kernel's ZeroMQ
  ports, TCP or ipc), and AppleEvents and LaunchServices (a program started through them is not in the sandbox);
- processes: no fork or posix_spawn, exec only of the worker's own interpreter (sandbox-exec execs it under the
  profile), signals only to itself, process information and control (`process-info*`: pidinfo, set-control,
  ...) only about itself;
- files: writes only in CRANE's run and worker folders (`crane-sbx-*`, `crane-tw-*` in the temporary folder) and
  the null/terminal devices; no hard links (a link to a user's file would be written through); no reads of
  Jupyter's runtime folders, where kernels' connection files (their HMAC keys) live.
Paths are resolved (`realpath`: Seatbelt sees /private/var, not /var) and written as SBPL string literals; a path
that cannot be named safely (a quote, a backslash, a control character; `^` in a regex) fails closed: no layer.

`launch(...)` uses the profile only after a trial start of the worker's own interpreter under it
(`trial_check`, once per interpreter and folders) has shown that it starts, writes in a run folder, and is denied
a write outside, a TCP and a UNIX-socket connection, a signal to its parent, a fork and a read of a runtime folder;
otherwise the layer did not run and says why. (A profile failing its trial is tried once more without the
`file-link` rule, an operation older releases may not know; the layer then does not claim hard links.) None of this can run on the Linux machine CRANE is built on: the
profile's text is tested here, and the trial runs in the macOS job of the CI matrix (.github/workflows/portable.yml).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable

from crane.sandbox.oslayer.layer import Launch, OsLayer
from crane.sandbox.oslayer.layer import jupyter_runtime_dirs as _runtime_dirs

SANDBOX_EXEC = "/usr/bin/sandbox-exec"  # an absolute path: never one found on $PATH
NAME = "sandbox-exec"
CONFINES = ("network (IP and UNIX sockets)", "signals and process control of other processes",
            "new processes (fork, spawn, exec of other programs)", "file writes outside CRANE's run folders",
            "hard links", "reads of Jupyter's runtime folders (kernel connection keys)", "AppleEvents, LaunchServices")
RUN_FOLDERS = "crane-(sbx|tw)-[^/]+(/|$)"  # CRANE's run folders (crane.sandbox.pipes) and worker homes (transplant)
WRITABLE_DEVICES = ('(literal "/dev/null")', '(literal "/dev/zero")', '(literal "/dev/dtracehelper")',
                    '(literal "/dev/stdout")', '(literal "/dev/stderr")', '(regex #"^/dev/fd/[0-9]+$")',
                    '(regex #"^/dev/tty")')
# mach services that start programs outside the sandbox or script other applications
LAUNCHERS = ("com.apple.coreservices.launchservicesd", "com.apple.coreservices.appleevents")


class Unnameable(ValueError):
    """A path the profile cannot name safely."""


def sbpl_string(text: str) -> str:
    """`text` as an SBPL string literal; control characters refused (they could end the rule)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise Unnameable(f"a control character in {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_ERE_SPECIAL = set(".[](){}*+?|$")


def sbpl_regex_prefix(path: str) -> str:
    """`path` as the literal start of a POSIX extended regex inside `#"..."` (each special character in a bracket
    expression: no backslash, whose reading inside `#"` differs between readers). `"`, `\\`, `^` and control
    characters are refused."""
    if any(c in '"\\^' or ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise Unnameable(f"a character the profile's regex cannot hold in {path!r}")
    return "".join(f"[{c}]" if c in _ERE_SPECIAL else c for c in path)


def real(path: str) -> str:
    """The path Seatbelt sees (symbolic links resolved as far as the path exists), without a trailing slash."""
    out = os.path.realpath(path)
    return out.rstrip("/") or "/"


def _home_runtime(e: dict[str, str]) -> list[str]:
    home = e.get("HOME") or os.path.expanduser("~")
    return [os.path.join(home, "Library", "Jupyter", "runtime"), os.path.join(home, ".local", "share", "jupyter",
                                                                               "runtime")]


def jupyter_runtime_dirs(env: dict[str, str], own_env: dict[str, str] | None = None) -> list[str]:
    """The runtime folders (oslayer.jupyter_runtime_dirs) with macOS's and the XDG defaults under `$HOME`."""
    return _runtime_dirs(env, own_env, _home_runtime)


def interpreter_paths(executable: str) -> list[str]:
    """The files exec'd to start `executable`: its resolved path and, for a framework build (python.org, Homebrew),
    the Python.app binary its launcher re-execs."""
    exe = real(executable)
    out = [exe]
    if "/Python.framework/" in exe:  # .../Python.framework/Versions/X.Y/bin/pythonX.Y -> .../Resources/Python.app
        version_dir = os.path.dirname(os.path.dirname(exe))
        out.append(os.path.join(version_dir, "Resources", "Python.app", "Contents", "MacOS", "Python"))
    return out


def seatbelt_profile(temp_dir: str, runtime_dirs: Iterable[str] = (), executables: Iterable[str] = (),
                     deny_links: bool = True) -> str:
    """The profile a portable worker starts under (see the module docstring). `temp_dir`: where CRANE makes its
    run folders; `runtime_dirs`: Jupyter runtime folders, unreadable; `executables`: the only files it may exec;
    `deny_links`: the `file-link` rule (an operation older macOS releases may not know: the trial tries without it
    only when the whole profile fails). Raises `Unnameable` for a path it cannot name safely."""
    run_re = "^" + sbpl_regex_prefix(real(temp_dir)) + "/" + RUN_FOLDERS
    lines = [
        "(version 1)",
        "(allow default)",
        "; network of every kind, UNIX domain sockets included",
        "(deny network*)",
        "(deny network-outbound (remote unix-socket))",
        "(deny network-bind (local unix-socket))",
        "; programs started or scripted outside the sandbox",
        "(deny appleevent-send)",
        "(deny mach-lookup " + " ".join(f"(global-name {sbpl_string(n)})" for n in LAUNCHERS) + ")",
        "; processes: none new; signals and process information only about itself",
        "(deny process-fork)",
        "(deny process-exec)",
    ]
    exes = [sbpl_string(p) for p in executables]
    if exes:
        lines.append("(allow process-exec " + " ".join(f"(literal {p})" for p in exes) + ")")
    lines += [
        "(deny signal)",
        "(allow signal (target self))",
        "(deny process-info*)",
        "(allow process-info* (target self))",
        "; files: writes only in CRANE's run folders and the null and terminal devices; no hard links",
        "(deny file-write*)",
        f"(allow file-write* (regex #{sbpl_string(run_re)})",
        "    " + " ".join(WRITABLE_DEVICES) + ")",
        *(["(deny file-link)"] if deny_links else []),
    ]
    secrets = [sbpl_string(real(d)) for d in runtime_dirs]
    if secrets:
        lines.append("; Jupyter's runtime folders: the kernels' connection files and their keys")
        lines.append("(deny file-read* file-write* " + " ".join(f"(subpath {s})" for s in secrets) + ")")
    return "\n".join(lines) + "\n"


def seatbelt_argv(argv: list[str], profile: str) -> list[str]:
    return [SANDBOX_EXEC, "-p", profile, *argv]


# The trial: the worker's interpreter under the profile, standard library only; exit 0 when every denial holds.
TRIAL_PROGRAM = r"""
import errno, os, socket, sys
run, outside, unix_path, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fails = []
def denied(what, fn):
    try:
        fn()
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            return
        fails.append("%s: %r" % (what, e))
        return
    fails.append(what + ": allowed")
try:
    with open(os.path.join(run, "written"), "w") as f:
        f.write("ok")
except OSError as e:
    fails.append("a write in the run folder: %r" % (e,))
denied("a write outside", lambda: open(outside, "x").close())
def tcp():
    s = socket.socket()
    s.connect(("127.0.0.1", port))
denied("a TCP connection", tcp)
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.connect(unix_path)
denied("a UNIX-socket connection", unix)
denied("a signal to its parent", lambda: os.kill(os.getppid(), 0))
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
denied("a fork", fork)
for d in sys.argv[5:]:  # (existing folders: under the profile even their metadata is refused)
    denied("a read of " + d, lambda: os.listdir(d))
if fails:
    sys.stderr.write("; ".join(fails))
    sys.exit(3)
"""


def trial_check(executable: str, temp_dir: str, runtime_dirs: list[str],
                runner: Callable[[list[str]], tuple[int, str]] | None = None, deny_links: bool = True) -> str | None:
    """Start `executable` under the profile with `TRIAL_PROGRAM`: None when it ran and every denial held, else
    why not. The daemon listens on a TCP port and a UNIX socket for it to be refused (not turned away)."""
    run_dir = tempfile.mkdtemp(prefix="crane-sbx-trial-", dir=temp_dir)
    sock_dir = tempfile.mkdtemp(prefix="crane-sock-", dir=temp_dir)
    outside = os.path.join(sock_dir, "outside")
    unix_path = os.path.join(sock_dir, "s")
    tcp = socket.socket()
    unix = socket.socket(socket.AF_UNIX)
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(1)
        unix.bind(unix_path)
        unix.listen(1)
        profile = seatbelt_profile(temp_dir, runtime_dirs, interpreter_paths(executable), deny_links)
        argv = seatbelt_argv([executable, "-I", "-S", "-c", TRIAL_PROGRAM, run_dir, outside, unix_path,
                              str(tcp.getsockname()[1]),
                              *[d for d in runtime_dirs if os.path.isdir(d)]], profile)
        code, err = (runner or _run)(argv)
        if code != 0:
            return f"a trial start under sandbox-exec failed (exit {code}): {err.strip()[:300]}"
        if not os.path.exists(os.path.join(run_dir, "written")):
            return "a trial start under sandbox-exec could not write in its run folder"
        if os.path.exists(outside):
            return "a trial start under sandbox-exec wrote outside its run folder"
        return None
    except (OSError, Unnameable) as exc:
        return f"the Seatbelt trial could not be set up: {exc}"
    finally:
        tcp.close()
        unix.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(sock_dir, ignore_errors=True)


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return -1, str(exc)
    return p.returncode, p.stderr.decode("utf-8", "replace")


_TRIALS: dict[tuple, tuple[str | None, bool]] = {}


def available(executable: str) -> str | None:
    """The trial, for `executable` with the daemon's own Jupyter runtime folders (cached)."""
    return usable(executable, tempfile.gettempdir(), jupyter_runtime_dirs({}, dict(os.environ)))[0]


def layer(ran: bool, why_not: str | None = None, deny_links: bool = True) -> OsLayer:
    return OsLayer(NAME, "darwin", CONFINES if deny_links else tuple(c for c in CONFINES if c != "hard links"),
                   ran, why_not)


def usable(executable: str, temp_dir: str, runtime_dirs: list[str], platform: str = sys.platform,
           exists: Callable[[str], bool] = os.path.exists,
           runner: Callable[[list[str]], tuple[int, str]] | None = None) -> tuple[str | None, bool]:
    """(None when a worker of `executable` can start under the profile, else why not; whether the profile keeps
    its `file-link` rule): macOS, the binary there, the trial passed (once per interpreter and folders, unless
    `runner` is given). A profile failing the trial is tried once more without the `file-link` rule; the layer
    then does not claim hard links."""
    if platform != "darwin":
        return f"{platform}: no sandbox-exec (macOS only)", True
    if not exists(SANDBOX_EXEC):
        return f"{SANDBOX_EXEC} is not there", True
    key = (executable, temp_dir, tuple(runtime_dirs))
    if runner is None and key in _TRIALS:
        return _TRIALS[key]
    out: tuple[str | None, bool] = (trial_check(executable, temp_dir, runtime_dirs, runner), True)
    if out[0] is not None and trial_check(executable, temp_dir, runtime_dirs, runner, deny_links=False) is None:
        out = (None, False)
    if runner is None:
        _TRIALS[key] = out
    return out


def launch(argv: list[str], env: dict[str, str], home: str, platform: str = "darwin",
           exists: Callable[[str], bool] = os.path.exists,
           runner: Callable[[list[str]], tuple[int, str]] | None = None) -> Launch:
    """`argv` (the worker's interpreter first) under sandbox-exec when `usable`, else unchanged, the layer saying
    why it did not run."""
    temp_dir = tempfile.gettempdir()
    runtime = jupyter_runtime_dirs(env)
    why, deny_links = usable(argv[0], temp_dir, runtime, platform, exists, runner)
    if why is not None:
        return Launch(list(argv), {}, layer(False, why))
    try:
        profile = seatbelt_profile(temp_dir, runtime, interpreter_paths(argv[0]), deny_links)
    except Unnameable as exc:
        return Launch(list(argv), {}, layer(False, str(exc)))
    return Launch(seatbelt_argv(list(argv), profile), {}, layer(True, None, deny_links))


def started(how: Launch, proc: subprocess.Popen) -> Launch:
    """Nothing more once it runs: sandbox-exec confined it before its first instruction."""
    return how


def release(how: Launch) -> None:
    """Nothing is held for the worker."""


def prepare_folder(path: str) -> None:
    """Run folders need nothing: the profile allows writes in every `crane-sbx-*` folder."""

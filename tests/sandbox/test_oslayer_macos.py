"""The macOS OS layer (crane.sandbox.oslayer.macos): the Seatbelt profile a portable worker starts under.

sandbox-exec does not exist on this Linux machine: here the profile is tested as text (each attack family denied,
the runtime folders unreadable, the run folders writable and nothing else, odd paths named exactly or refused),
and the trial program is run unconfined to show it fails an unconfined process. On macOS (the CI matrix's macOS
job) the real trial runs under sandbox-exec and must pass: every denial holding for the real interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import warnings

import pytest

from crane.sandbox import oslayer
from crane.sandbox.oslayer import macos

pytestmark = [pytest.mark.portable_platform,
              pytest.mark.skipif(sys.platform == "win32", reason="a macOS profile names POSIX paths")]
T = "/private/var/folders/ab/cd/T"


def _rules(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(";")]


def _strings(text: str) -> list[str]:
    """The SBPL string literals of `text`, read back the way a Scheme reader does."""
    out, i = [], 0
    while i < len(text):
        if text[i] == '"':
            j, buf = i + 1, []
            while text[j] != '"':
                if text[j] == "\\":
                    j += 1
                buf.append(text[j])
                j += 1
            out.append("".join(buf))
            i = j + 1
        else:
            i += 1
    return out


def _balanced(text: str) -> bool:
    depth = 0
    for s in re.sub(r'"(?:\\.|[^"\\])*"', '""', text):
        depth += {"(": 1, ")": -1}.get(s, 0)
        if depth < 0:
            return False
    return depth == 0


def _write_regex(text: str) -> re.Pattern:
    """The run folders' regex, compiled by Python's re (as POSIX ERE reads it: `[[]` is a literal bracket, which
    Python also reads so, with a FutureWarning)."""
    m = re.search(r'\(allow file-write\* \(regex #("(?:\\.|[^"\\])*")\)', text)
    assert m is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(_strings(m.group(1))[0])


def test_every_family_of_round_5_is_denied_after_the_allow_default():
    text = macos.seatbelt_profile(T, ["/Users/me/Library/Jupyter/runtime"], ["/usr/local/bin/python3.11"])
    rules = _rules(text)
    assert rules[:2] == ["(version 1)", "(allow default)"]
    for rule in ("(deny network*)", "(deny network-outbound (remote unix-socket))",
                 "(deny network-bind (local unix-socket))", "(deny process-fork)", "(deny process-exec)",
                 "(deny signal)", "(allow signal (target self))", "(deny process-info*)",
                 "(allow process-info* (target self))", "(deny file-write*)", "(deny file-link)",
                 "(deny appleevent-send)"):
        assert rule in rules, rule
    # last match wins in SBPL: each narrow allow comes after its deny, and nothing allows network or fork again
    for deny, allow in (("(deny signal)", "(allow signal (target self))"),
                        ("(deny process-info*)", "(allow process-info* (target self))"),
                        ("(deny process-exec)", "(allow process-exec"), ("(deny file-write*)", "(allow file-write*")):
        assert text.index(deny) < text.index(allow)
    assert not [r for r in rules if r.startswith(("(allow network", "(allow process-fork", "(allow file-link",
                                                  "(allow file-read"))]
    assert '(allow process-exec (literal "/usr/local/bin/python3.11"))' in rules
    assert "com.apple.coreservices.launchservicesd" in text
    assert _balanced(text)


def test_the_runtime_folders_are_unreadable_and_unwritable_after_every_allow():
    dirs = ["/Users/me/Library/Jupyter/runtime", "/Volumes/data/jr"]
    text = macos.seatbelt_profile(T, dirs)
    last = _rules(text)[-1]
    assert last == ('(deny file-read* file-write* (subpath "/Users/me/Library/Jupyter/runtime") '
                    '(subpath "/Volumes/data/jr"))')
    assert text.rindex("(deny file-read*") > text.rindex("(allow ")


def test_jupyter_runtime_folders_come_from_the_kernels_environment_and_the_daemons(tmp_path):
    kernel_env = {"HOME": "/Users/k", "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_DATA_DIR": "/srv/jd"}
    got = macos.jupyter_runtime_dirs(kernel_env, {"HOME": "/Users/d"})
    assert got == [os.path.realpath(tmp_path / "rt"), "/srv/jd/runtime", "/Users/k/Library/Jupyter/runtime",
                   "/Users/k/.local/share/jupyter/runtime", "/Users/d/Library/Jupyter/runtime",
                   "/Users/d/.local/share/jupyter/runtime"]
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "rt", target_is_directory=True)
    (tmp_path / "rt").mkdir()
    # Seatbelt sees resolved paths: a runtime folder reached through a link is named by its target
    assert macos.jupyter_runtime_dirs({"JUPYTER_RUNTIME_DIR": str(link), "HOME": "/h"}, {})[0] == str(tmp_path / "rt")
    assert macos.jupyter_runtime_dirs({"JUPYTER_RUNTIME_DIR": "relative/rt", "HOME": "/h"}, {})[0] == \
        "/h/Library/Jupyter/runtime"


def test_writes_are_allowed_in_crane_s_run_folders_only():
    pattern = _write_regex(macos.seatbelt_profile(T))
    for ok in (f"{T}/crane-sbx-x1y2", f"{T}/crane-sbx-x1y2/cwd/out.csv", f"{T}/crane-tw-abc/log",
               f"{T}/crane-sbx-trial-q/written"):
        assert pattern.match(ok), ok
    for bad in (f"{T}/other/out.csv", f"{T}/crane-sbx-", f"{T}/crane-sbxx/a", f"{T}x/crane-sbx-1/a",
                "/Users/me/data.csv", f"/Users/me{T}/crane-sbx-1/a"):
        assert not pattern.match(bad), bad


@pytest.mark.parametrize("odd", ["/tmp/a.b+c (1)", "/tmp/$x{2}|y*?", "/tmp/dir [copy]", "/tmp/ünï cödé"])
def test_odd_temporary_folders_are_named_exactly(odd):
    text = macos.seatbelt_profile(odd)
    pattern = _write_regex(text)
    assert pattern.match(os.path.realpath(odd) + "/crane-sbx-1/f")
    # every special character is literal: no other folder matches
    for c in ".+()$|*?[]{}":
        if c in odd:
            assert not pattern.match(os.path.realpath(odd).replace(c, "X") + "/crane-sbx-1/f")
    assert _balanced(text)


@pytest.mark.parametrize("odd", ['/tmp/a"b', "/tmp/a\\b", "/tmp/a^b", "/tmp/a\nb", "/tmp/a\x7fb"])
def test_paths_the_profile_cannot_name_safely_are_refused(odd):
    with pytest.raises(macos.Unnameable):
        macos.seatbelt_profile(odd)


@pytest.mark.parametrize("name", ['a"b', "a\\b", "a^b", "a\nb"])
def test_a_temporary_folder_it_cannot_name_gives_no_layer_and_says_why(tmp_path, monkeypatch, name):
    odd = tmp_path / name
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    calls: list[list[str]] = []

    def runner(argv: list[str]) -> tuple[int, str]:
        calls.append(argv)
        return 0, ""

    how = macos.launch(["/usr/bin/python3", "-c", "0"], {}, str(tmp_path), platform="darwin", exists=lambda p: True,
                       runner=runner)
    assert calls == [] and how.argv == ["/usr/bin/python3", "-c", "0"] and how.layer.names() == []
    assert "cannot hold" in (how.layer.why_not or "") or "control character" in (how.layer.why_not or "")


def test_quotes_and_backslashes_in_literal_paths_are_escaped_and_read_back_exactly():
    odd = '/Users/me/Jupyter "rt" \\ dir'
    text = macos.seatbelt_profile(T, [odd], ['/opt/py "3"/bin/python'])
    assert odd in _strings(text) and '/opt/py "3"/bin/python' in _strings(text)
    assert _balanced(text)
    with pytest.raises(macos.Unnameable):
        macos.seatbelt_profile(T, ["/Users/me/run\ntime"])


def test_the_framework_interpreter_s_app_binary_may_be_execd():
    exe = "/Library/Frameworks/Python.framework/Versions/3.11/bin/python3.11"
    assert macos.interpreter_paths(exe) == [
        exe, "/Library/Frameworks/Python.framework/Versions/3.11/Resources/Python.app/Contents/MacOS/Python"]
    assert macos.interpreter_paths("/usr/bin/true") == [os.path.realpath("/usr/bin/true")]


def test_the_worker_starts_under_sandbox_exec_only_after_a_passing_trial(tmp_path):
    argv = ["/usr/bin/python3", "-c", "print(1)"]
    seen: list[list[str]] = []

    def passing(cmd: list[str]) -> tuple[int, str]:
        seen.append(cmd)
        with open(os.path.join(cmd[cmd.index("-c") + 2], "written"), "w") as f:  # what the trial writes
            f.write("ok")
        return 0, ""

    how = macos.launch(argv, {"HOME": str(tmp_path)}, str(tmp_path), platform="darwin",
                       exists=lambda p: p == macos.SANDBOX_EXEC, runner=passing)
    assert how.argv[:2] == ["/usr/bin/sandbox-exec", "-p"] and how.argv[3:] == argv
    assert how.layer.ran and how.layer.names() == ["sandbox-exec"] and "(deny network*)" in how.argv[2]
    trial = seen[0]
    assert trial[:2] == ["/usr/bin/sandbox-exec", "-p"] and trial[2] == how.argv[2]  # the same profile
    # the trial failing, the binary missing, another platform: the argv unchanged, no layer claimed, the reason
    failing = macos.launch(argv, {}, str(tmp_path), platform="darwin", exists=lambda p: True,
                           runner=lambda cmd: (3, "a fork: allowed"))
    assert failing.argv == argv and failing.layer.names() == [] and "a fork: allowed" in (failing.layer.why_not or "")
    silent = macos.launch(argv, {}, str(tmp_path), platform="darwin", exists=lambda p: True,
                          runner=lambda cmd: (0, ""))
    assert silent.argv == argv and "could not write" in (silent.layer.why_not or "")
    assert "not there" in (macos.launch(argv, {}, "", platform="darwin", exists=lambda p: False).layer.why_not or "")
    assert oslayer.launch(argv, {}, str(tmp_path), platform="linux").argv == argv


def test_a_macos_that_does_not_know_file_link_gets_the_rest_and_the_layer_says_so(tmp_path):
    def older_macos(cmd: list[str]) -> tuple[int, str]:
        if "(deny file-link)" in cmd[2]:
            return 65, "sandbox-exec: unbound variable: file-link"
        with open(os.path.join(cmd[cmd.index("-c") + 2], "written"), "w") as f:
            f.write("ok")
        return 0, ""

    how = macos.launch(["/usr/bin/python3"], {}, str(tmp_path), platform="darwin", exists=lambda p: True,
                       runner=older_macos)
    assert how.layer.ran and "(deny file-link)" not in how.argv[2] and "(deny network*)" in how.argv[2]
    assert "hard links" not in how.layer.confines and "hard links" in macos.CONFINES
    assert macos.seatbelt_profile(T, deny_links=False).count("file-link") == 0


@pytest.mark.skipif(sys.platform == "darwin", reason="unconfined here: the trial is run without sandbox-exec")
def test_the_trial_fails_an_unconfined_interpreter(tmp_path):
    """The trial can fail: run without sandbox-exec, every denial it checks is reported as allowed."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()

    def unconfined(argv: list[str]) -> tuple[int, str]:
        p = subprocess.run(argv[3:], capture_output=True, timeout=60)  # the interpreter, without sandbox-exec
        return p.returncode, p.stderr.decode()

    why = macos.trial_check(sys.executable, tempfile.gettempdir(), [str(runtime)], runner=unconfined)
    assert why is not None
    for family in ("a write outside: allowed", "a TCP connection: allowed", "a UNIX-socket connection: allowed",
                   "a signal to its parent: allowed", "a fork: allowed", f"a read of {runtime}: allowed"):
        assert family in why, (family, why)


@pytest.mark.skipif(sys.platform != "darwin", reason="sandbox-exec exists only on macOS (the CI matrix's macOS job)")
def test_on_macos_the_real_trial_passes_for_this_interpreter():
    runtime = macos.jupyter_runtime_dirs(dict(os.environ))
    os.makedirs(runtime[0], exist_ok=True)  # an existing runtime folder, so its read is really tried
    assert os.path.exists(macos.SANDBOX_EXEC)
    assert macos.trial_check(sys.executable, tempfile.gettempdir(), runtime) is None
    how = oslayer.launch([sys.executable, "-c", "0"], dict(os.environ), tempfile.gettempdir())
    assert how.layer.ran and how.argv[0] == macos.SANDBOX_EXEC
    assert subprocess.run(how.argv, timeout=60).returncode == 0  # the worker's interpreter starts under it

"""The Windows OS layer (crane.sandbox.oslayer.windows; shared/winjob.py's structures; worker/limits.py's job).

Here (Linux): the ctypes structures against the documented x64 layouts (sizes and field offsets from winnt.h),
the low-integrity SID's bytes, the job's limits, reading an integrity level back from a TOKEN_MANDATORY_LABEL
buffer, the TOKEN_PRIVILEGES the privilege removal reads and writes, and that no layer is claimed off Windows. On
Windows (the CI matrix's windows job) a real worker is started, put in the job, its privileges removed and
lowered to low integrity, and must be unable to write a medium-integrity folder or start a process, while
writing its low-labelled folder, and keep no privilege but SeChangeNotify; closing the daemon's job handle must
end it. None of the Windows calls has run from here.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile

import pytest

from crane.sandbox import oslayer
from crane.sandbox.oslayer import windows
from crane.sandbox.shared import winjob
from crane.sandbox.worker import limits

pytestmark = pytest.mark.portable_platform
x64 = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the documented layouts checked are x64's")


def _layout(struct: type[ctypes.Structure]) -> dict[str, int]:
    return {name: getattr(struct, name).offset for name, *_ in struct._fields_}


@x64
def test_the_structures_match_the_documented_x64_layouts():
    assert ctypes.sizeof(windows.SidAndAttributes) == 16
    assert _layout(windows.SidAndAttributes) == {"Sid": 0, "Attributes": 8}
    assert ctypes.sizeof(windows.TokenMandatoryLabel) == 16
    assert ctypes.sizeof(windows.BasicUiRestrictions) == 4
    assert ctypes.sizeof(winjob.BasicLimitInformation) == 64  # JOBOBJECT_BASIC_LIMIT_INFORMATION
    assert _layout(winjob.BasicLimitInformation) == {
        "PerProcessUserTimeLimit": 0, "PerJobUserTimeLimit": 8, "LimitFlags": 16, "MinimumWorkingSetSize": 24,
        "MaximumWorkingSetSize": 32, "ActiveProcessLimit": 40, "Affinity": 48, "PriorityClass": 56,
        "SchedulingClass": 60}
    assert ctypes.sizeof(winjob.IoCounters) == 48
    assert ctypes.sizeof(winjob.ExtendedLimitInformation) == 144  # JOBOBJECT_EXTENDED_LIMIT_INFORMATION
    assert _layout(winjob.ExtendedLimitInformation) == {
        "BasicLimitInformation": 0, "IoInfo": 64, "ProcessMemoryLimit": 112, "JobMemoryLimit": 120,
        "PeakProcessMemoryUsed": 128, "PeakJobMemoryUsed": 136}


def test_the_documented_constants():
    # S-1-16-4096: revision 1, one sub-authority, SECURITY_MANDATORY_LABEL_AUTHORITY {0,0,0,0,0,16}, RID 0x1000
    assert windows.LOW_INTEGRITY_SID == bytes.fromhex("0101000000000010" "00100000")
    assert windows.sid_bytes((0, 0, 0, 0, 0, 5), 32, 544) == bytes.fromhex("0102000000000005" "20000000" "20020000")
    assert (windows.TOKEN_INTEGRITY_LEVEL_CLASS, windows.SE_GROUP_INTEGRITY) == (25, 0x20)
    assert (windows.TOKEN_QUERY, windows.TOKEN_ADJUST_DEFAULT) == (0x8, 0x80)
    assert (winjob.JOB_OBJECT_LIMIT_ACTIVE_PROCESS, winjob.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
            winjob.JOB_OBJECT_LIMIT_PROCESS_MEMORY, winjob.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS) == \
        (0x8, 0x2000, 0x100, 9)
    assert windows.LOW_LABEL_SDDL == "S:(ML;OICI;NW;;;LW)"
    assert (windows.SE_FILE_OBJECT, windows.LABEL_SECURITY_INFORMATION) == (1, 0x10)


def test_the_daemon_s_job_allows_one_process_killed_on_close_with_a_memory_limit():
    info = windows.job_limits(3 << 30)
    basic = info.BasicLimitInformation
    for flag in (winjob.JOB_OBJECT_LIMIT_ACTIVE_PROCESS, winjob.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
                 winjob.JOB_OBJECT_LIMIT_PROCESS_MEMORY, winjob.JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION):
        assert basic.LimitFlags & flag
    assert basic.ActiveProcessLimit == 1 and info.ProcessMemoryLimit == 3 << 30
    run = limits.windows_job_limits(1 << 30, 2.5)  # the worker's own, per run (nested in the daemon's)
    assert run.BasicLimitInformation.ActiveProcessLimit == 1
    assert run.BasicLimitInformation.LimitFlags & winjob.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
    assert run.BasicLimitInformation.PerProcessUserTimeLimit == 25_000_000


def test_the_integrity_label_is_built_and_read_back():
    sid = ctypes.create_string_buffer(windows.LOW_INTEGRITY_SID, len(windows.LOW_INTEGRITY_SID))
    tml = windows.low_label(sid)
    assert tml.Label.Sid == ctypes.addressof(sid) and tml.Label.Attributes == windows.SE_GROUP_INTEGRITY
    # what GetTokenInformation(TokenIntegrityLevel) writes: the label, its SID right after, pointing into the buffer
    for rid in (windows.SECURITY_MANDATORY_LOW_RID, windows.SECURITY_MANDATORY_MEDIUM_RID):
        size = ctypes.sizeof(windows.TokenMandatoryLabel)
        buf = ctypes.create_string_buffer(64)
        label = windows.TokenMandatoryLabel()
        label.Label.Sid = ctypes.addressof(buf) + size
        label.Label.Attributes = windows.SE_GROUP_INTEGRITY
        sid_b = windows.sid_bytes(windows.SECURITY_MANDATORY_LABEL_AUTHORITY, rid)
        ctypes.memmove(buf, ctypes.addressof(label), size)
        ctypes.memmove(ctypes.addressof(buf) + size, sid_b, len(sid_b))
        assert windows.integrity_rid(buf.raw, ctypes.addressof(buf)) == rid
        assert windows.integrity_rid(buf.raw, ctypes.addressof(buf) + 4096) == -1  # a pointer out of the buffer


@x64
def test_the_privilege_structures_and_constants():
    assert ctypes.sizeof(windows.Luid) == 8 and _layout(windows.Luid) == {"LowPart": 0, "HighPart": 4}
    assert ctypes.sizeof(windows.LuidAndAttributes) == 12  # TOKEN_PRIVILEGES: a DWORD count, then 12-byte entries
    assert _layout(windows.LuidAndAttributes) == {"Luid": 0, "Attributes": 8}
    assert (windows.TOKEN_ADJUST_PRIVILEGES, windows.TOKEN_PRIVILEGES_CLASS, windows.SE_PRIVILEGE_REMOVED,
            windows.SE_CHANGE_NOTIFY_PRIVILEGE, windows.ERROR_NOT_ALL_ASSIGNED) == (0x20, 3, 0x4, 23, 1300)
    assert any("privileges" in c for c in windows.CONFINES)


def test_every_privilege_but_change_notify_is_removed():
    # what GetTokenInformation(TokenPrivileges) writes for an elevated user: SeChangeNotify (23, enabled),
    # SeDebug (20), SeBackup (17), SeRestore (18), SeTakeOwnership (9), SeShutdown (19), one with a high part
    held = [(23, 0, 3), (20, 0, 0), (17, 0, 0), (18, 0, 0), (9, 0, 0), (19, 0, 2), (23, 1, 0)]
    buf = len(held).to_bytes(4, "little") + b"".join(
        lo.to_bytes(4, "little") + hi.to_bytes(4, "little", signed=True) + a.to_bytes(4, "little")
        for lo, hi, a in held)
    assert windows.token_privileges(buf) == held
    change = windows.removal(windows.token_privileges(buf))
    assert len(change) == 4 + 12 * 6
    assert windows.token_privileges(change) == [(lo, hi, windows.SE_PRIVILEGE_REMOVED) for lo, hi, _ in held
                                                if (lo, hi) != (23, 0)]
    assert windows.removal([(23, 0, 3)]) == bytes(4)  # nothing to remove: an empty list
    with pytest.raises(ValueError):
        windows.token_privileges((5).to_bytes(4, "little") + bytes(12))
    if sys.platform != "win32":
        with pytest.raises(OSError, match="not Windows"):
            windows.strip_privileges(0)


@pytest.mark.skipif(sys.platform == "win32", reason="off Windows only")
def test_off_windows_no_layer_is_claimed(tmp_path):
    how = oslayer.launch(["python", "-c", "0"], {}, str(tmp_path), platform="win32")
    assert how.layer.names() == [] and "not Windows" in (how.layer.why_not or "")
    proc = subprocess.Popen([sys.executable, "-c", "0"])
    proc.wait()
    assert oslayer.started(how, proc, platform="win32").layer.names() == []
    tmp = os.path.join(str(tmp_path), "tmp")
    assert windows.temp_env(str(tmp_path)) == {"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp}
    with pytest.raises(OSError):
        windows.label_low(str(tmp_path))


def test_jupyter_s_runtime_folders_on_windows(tmp_path):
    appdata = str(tmp_path / "AppData" / "Roaming")
    got = windows.jupyter_runtime_dirs({"APPDATA": appdata, "JUPYTER_DATA_DIR": str(tmp_path / "jd")}, {})
    assert got == [os.path.realpath(tmp_path / "jd" / "runtime"), os.path.realpath(os.path.join(appdata, "jupyter",
                                                                                                "runtime"))]
    assert windows.NO_READ_UP_SDDL == "S:(ML;OICI;NRNW;;;ME)"


def test_the_worker_keeps_systemroot_which_python_needs_to_start_on_windows(monkeypatch):
    monkeypatch.delenv("SYSTEMROOT", raising=False)
    monkeypatch.delenv("SystemRoot", raising=False)
    assert windows.system_env({"SystemRoot": "C:\\Windows"}) == {"SYSTEMROOT": "C:\\Windows"}
    assert windows.system_env({}) == {}
    monkeypatch.setenv("SYSTEMROOT", "D:\\Win")
    assert windows.system_env({}) == {"SYSTEMROOT": "D:\\Win"}


PROBE = r"""
import json, os, subprocess, sys
sys.stdin.readline()  # the daemon has confined it
out = {}
def tried(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = "refused: %r" % (e,)
def write(path):
    with open(path, "w") as f:
        f.write("x")
tried("medium", lambda: write(os.path.join(sys.argv[1], "medium.txt")))
tried("low", lambda: write(os.path.join(sys.argv[2], "low.txt")))
tried("child", lambda: subprocess.run([sys.executable, "-c", "0"], check=True, timeout=30))
tried("runtime", lambda: open(os.path.join(sys.argv[3], "kernel-1.json")).read())
print(json.dumps(out), flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(sys.platform != "win32", reason="job objects and integrity levels exist only on Windows "
                                                    "(the CI matrix's windows job)")
def test_on_windows_a_worker_at_low_integrity_in_its_job_writes_only_its_folder(tmp_path):
    medium = tempfile.mkdtemp(dir=tmp_path)
    home = tempfile.mkdtemp(dir=tmp_path)
    run = tempfile.mkdtemp(dir=tmp_path)
    runtime = tmp_path / "jupyter" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "kernel-1.json").write_text('{"key": "secret"}')
    how = oslayer.launch([sys.executable, "-c", PROBE, medium, run, str(runtime)],
                         {"JUPYTER_RUNTIME_DIR": str(runtime)}, home)
    assert windows.RUNTIME in how.layer.confines
    oslayer.prepare_folder(run)
    proc = subprocess.Popen(how.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **how.env})
    how = oslayer.started(how, proc)
    assert how.layer.ran, how.layer.why_not
    left = windows.strip_privileges(int(proc._handle))  # type: ignore[attr-defined]
    assert left in ([], [windows.SE_CHANGE_NOTIFY_PRIVILEGE]), left  # the worker's token kept no other privilege
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    got = json.loads(proc.stdout.readline())
    assert got["low"] == "ok"
    assert got["medium"].startswith("refused") and not os.path.exists(os.path.join(medium, "medium.txt"))
    assert got["child"].startswith("refused")
    assert got["runtime"].startswith("refused")  # the key, hidden by the no-read-up label
    assert (runtime / "kernel-1.json").read_text() == '{"key": "secret"}'  # the user's own processes still read it
    oslayer.release(how)  # the daemon's job handle closed: the worker ends with it, its stdin still open
    proc.wait(timeout=30)
    assert how.handles == []

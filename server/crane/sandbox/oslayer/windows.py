"""Windows OS layer (daemon side): a portable worker in a job object, its token lowered to low integrity.

The daemon starts the worker (crane.sandbox.transplant) with its ordinary token; the worker then blocks reading
its first line from stdin. Before that line (the modules, then the kernel's state) is sent, `started`:
1. puts the worker in a job object the daemon holds (`job_limits`): one active process (no child processes:
   CreateProcess fails, and so do `subprocess`, `os.system`, `ctypes` calls to WinExec), killed when the daemon's
   handle closes (the daemon ending, however it ends), a per-process committed-memory limit, no error dialogs, UI
   restrictions (no clipboard, desktops, global atoms, or handles of other processes' windows);
2. removes every privilege of the worker's primary token but SeChangeNotifyPrivilege (`strip_privileges`:
   AdjustTokenPrivileges with SE_PRIVILEGE_REMOVED, for good: the privilege set CreateRestrictedToken's
   DISABLE_MAX_PRIVILEGE leaves; an elevated daemon's SeDebug, SeBackup, SeRestore, SeTakeOwnership,
   SeImpersonate, ... are gone) and reads the list back;
3. lowers that token to low integrity (SetTokenInformation(TokenIntegrityLevel) with the S-1-16-4096 label:
   lowering needs no privilege) and reads it back: a low-integrity process cannot write, delete or rename files
   and folders at medium integrity (every file the user owns, by default), nor open the user's other processes
   for writing (no-write-up), whatever Python or native code it runs.
Why not a new restricted token (CreateRestrictedToken): the worker is the daemon's `subprocess.Popen` child, which
takes no token, and a running process's primary token cannot be replaced; privileges and the integrity level are
the two parts of a token that can be changed in place. So the worker's groups are not made deny-only and it has
no restricting SIDs (that would need CreateProcessAsUserW with such a token: not done).
The worker's own folder (and its temporary folder, TMP/TEMP/TMPDIR) and each run folder (`prepare_folder`) are
labelled low (`S:(ML;OICI;NW;;;LW)`, inherited by what is made in them), so the run can write only there.
Jupyter's runtime folders (`%APPDATA%\\jupyter\\runtime`, `$JUPYTER_RUNTIME_DIR`, `$JUPYTER_DATA_DIR\\runtime`) are
labelled medium with no-read-up (`S:(ML;OICI;NRNW;;;ME)`: the user's own processes, at medium, are unaffected),
so the worker cannot read the connection files' keys there (a connection file elsewhere stays readable).
Not confined on Windows (said in docs/sandbox.md): network (a low-integrity process may still connect, also to the
kernel's ZeroMQ ports: an AppContainer would be needed), reads elsewhere, signals beyond the no-write-up rule; the
Python guard is the only layer for those. The code that starts the worker runs
with its privileges and at medium integrity until steps 2-3 (Python's startup and site, before any state or
notebook code arrives).

Structures and constants are plain `ctypes` (importable and tested on Linux for their documented x64 sizes and
offsets); every Windows call is behind `sys.platform == "win32"`. None of it has run on Windows from here: the
CI matrix's windows job (.github/workflows/portable.yml) runs tests/sandbox/test_oslayer_windows.py there.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from typing import Any

from crane.sandbox.oslayer.layer import Launch, OsLayer
from crane.sandbox.oslayer.layer import jupyter_runtime_dirs as _runtime_dirs
from crane.sandbox.shared.winjob import (
    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
    JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_LIMIT_PROCESS_MEMORY,
    ExtendedLimitInformation,
)

NAME = "low integrity + job object"
CONFINES = ("file writes outside CRANE's run folders (medium-integrity files)", "child processes",
            "survival of the daemon (killed with it)", "memory (per-process commit limit)",
            "writes to other processes (no-write-up)", "clipboard, desktops, global atoms",
            "privileges (every one removed but SeChangeNotifyPrivilege)",
            "reads of Jupyter's runtime folders (kernel connection keys)")
RUNTIME = CONFINES[-1]

# winnt.h / securitybaseapi.h / accctrl.h
SE_GROUP_INTEGRITY = 0x00000020
TOKEN_QUERY = 0x0008
TOKEN_ADJUST_DEFAULT = 0x0080
TOKEN_ADJUST_PRIVILEGES = 0x0020
TOKEN_PRIVILEGES_CLASS = 3  # TOKEN_INFORMATION_CLASS.TokenPrivileges
SE_PRIVILEGE_REMOVED = 0x00000004
SE_CHANGE_NOTIFY_PRIVILEGE = 23  # its well-known LUID (low part; high part 0): kept, as DISABLE_MAX_PRIVILEGE keeps it
ERROR_NOT_ALL_ASSIGNED = 1300
TOKEN_INTEGRITY_LEVEL_CLASS = 25  # TOKEN_INFORMATION_CLASS.TokenIntegrityLevel
SECURITY_MANDATORY_LABEL_AUTHORITY = (0, 0, 0, 0, 0, 16)
SECURITY_MANDATORY_LOW_RID = 0x1000
SECURITY_MANDATORY_MEDIUM_RID = 0x2000
SE_FILE_OBJECT = 1
LABEL_SECURITY_INFORMATION = 0x00000010
SDDL_REVISION_1 = 1
LOW_LABEL_SDDL = "S:(ML;OICI;NW;;;LW)"  # mandatory label, object+container inherit, no-write-up, low integrity
NO_READ_UP_SDDL = "S:(ML;OICI;NRNW;;;ME)"  # medium (the user's own level), no-read-up and no-write-up for lower ones
JOB_OBJECT_BASIC_UI_RESTRICTIONS_CLASS = 4
JOB_OBJECT_UILIMIT_ALL = 0x000000FF  # HANDLES..EXITWINDOWS: every basic UI restriction
DEFAULT_MEMORY_BYTES = 4 << 30
NOT_STARTED = "not started yet"


class SidAndAttributes(ctypes.Structure):
    """SID_AND_ATTRIBUTES (x64: 16 bytes)."""

    _fields_ = [("Sid", ctypes.c_void_p), ("Attributes", ctypes.c_uint32)]


class TokenMandatoryLabel(ctypes.Structure):
    """TOKEN_MANDATORY_LABEL (x64: 16 bytes)."""

    _fields_ = [("Label", SidAndAttributes)]


class BasicUiRestrictions(ctypes.Structure):
    """JOBOBJECT_BASIC_UI_RESTRICTIONS (4 bytes)."""

    _fields_ = [("UIRestrictionsClass", ctypes.c_uint32)]


class Luid(ctypes.Structure):
    """LUID (8 bytes)."""

    _fields_ = [("LowPart", ctypes.c_uint32), ("HighPart", ctypes.c_int32)]


class LuidAndAttributes(ctypes.Structure):
    """LUID_AND_ATTRIBUTES (12 bytes, 4-aligned: TOKEN_PRIVILEGES' entries follow its count at offset 4)."""

    _fields_ = [("Luid", Luid), ("Attributes", ctypes.c_uint32)]


def token_privileges(buf: bytes) -> list[tuple[int, int, int]]:
    """A TOKEN_PRIVILEGES buffer (what GetTokenInformation(TokenPrivileges) writes) read as (LUID low part, high
    part, attributes) per privilege."""
    count = int.from_bytes(buf[:4], "little")
    size = ctypes.sizeof(LuidAndAttributes)
    if 4 + count * size > len(buf):
        raise ValueError("TOKEN_PRIVILEGES buffer shorter than its count")
    out = []
    for i in range(count):
        e = LuidAndAttributes.from_buffer_copy(buf, 4 + i * size)
        out.append((int(e.Luid.LowPart), int(e.Luid.HighPart), int(e.Attributes)))
    return out


def removal(privileges: list[tuple[int, int, int]]) -> bytes:
    """The TOKEN_PRIVILEGES for AdjustTokenPrivileges that removes each of `privileges` but SeChangeNotify."""
    gone = [(lo, hi) for lo, hi, _ in privileges if (lo, hi) != (SE_CHANGE_NOTIFY_PRIVILEGE, 0)]
    out = len(gone).to_bytes(4, "little")
    for lo, hi in gone:
        e = LuidAndAttributes(Luid(lo, hi), SE_PRIVILEGE_REMOVED)
        out += ctypes.string_at(ctypes.addressof(e), ctypes.sizeof(e))
    return out


def sid_bytes(authority: tuple[int, ...], *sub_authorities: int) -> bytes:
    """A SID in its binary form: revision 1, the count, the 6-byte big-endian authority, little-endian RIDs."""
    return (bytes([1, len(sub_authorities), *authority])
            + b"".join(int(r).to_bytes(4, "little") for r in sub_authorities))


LOW_INTEGRITY_SID = sid_bytes(SECURITY_MANDATORY_LABEL_AUTHORITY, SECURITY_MANDATORY_LOW_RID)  # S-1-16-4096


def job_limits(memory_bytes: int) -> ExtendedLimitInformation:
    """The daemon's job for one worker: one process, killed on the job's close, `memory_bytes` of commit."""
    info = ExtendedLimitInformation()
    basic = info.BasicLimitInformation
    basic.LimitFlags = (JOB_OBJECT_LIMIT_ACTIVE_PROCESS | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
                        | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION | JOB_OBJECT_LIMIT_PROCESS_MEMORY)
    basic.ActiveProcessLimit = 1
    info.ProcessMemoryLimit = int(memory_bytes)
    return info


def low_label(sid: Any) -> TokenMandatoryLabel:
    """The TOKEN_MANDATORY_LABEL that sets a token's integrity to `sid` (a pointer to the SID's bytes)."""
    tml = TokenMandatoryLabel()
    tml.Label.Sid = ctypes.cast(sid, ctypes.c_void_p)
    tml.Label.Attributes = SE_GROUP_INTEGRITY
    return tml


def integrity_rid(tml_buffer: bytes, base: int) -> int:
    """The integrity RID of a TOKEN_MANDATORY_LABEL read back into `tml_buffer` (allocated at address `base`):
    the SID's last sub-authority (its pointer points into the same buffer)."""
    tml = TokenMandatoryLabel.from_buffer_copy(tml_buffer[:ctypes.sizeof(TokenMandatoryLabel)])
    off = int(tml.Label.Sid or 0) - base
    if off < 0 or off + 8 > len(tml_buffer):
        return -1
    count = tml_buffer[off + 1]
    last = off + 8 + 4 * (count - 1)
    return int.from_bytes(tml_buffer[last:last + 4], "little") if count else -1


class _Win:
    """The Windows calls used here, with their argument and result types (handles are pointers: never ints)."""

    def __init__(self) -> None:
        k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        adv = ctypes.WinDLL("advapi32", use_last_error=True)  # type: ignore[attr-defined]
        vp, u32, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
        self.CreateJobObjectW = self._fn(k32.CreateJobObjectW, vp, [vp, ctypes.c_wchar_p])
        self.SetInformationJobObject = self._fn(k32.SetInformationJobObject, i32, [vp, i32, vp, u32])
        self.AssignProcessToJobObject = self._fn(k32.AssignProcessToJobObject, i32, [vp, vp])
        self.CloseHandle = self._fn(k32.CloseHandle, i32, [vp])
        self.LocalFree = self._fn(k32.LocalFree, vp, [vp])
        self.AdjustTokenPrivileges = self._fn(adv.AdjustTokenPrivileges, i32, [vp, i32, vp, u32, vp, vp])
        self.OpenProcessToken = self._fn(adv.OpenProcessToken, i32, [vp, u32, ctypes.POINTER(vp)])
        self.SetTokenInformation = self._fn(adv.SetTokenInformation, i32, [vp, i32, vp, u32])
        self.GetTokenInformation = self._fn(adv.GetTokenInformation, i32,
                                            [vp, i32, vp, u32, ctypes.POINTER(u32)])
        self.ConvertStringSecurityDescriptorToSecurityDescriptorW = self._fn(
            adv.ConvertStringSecurityDescriptorToSecurityDescriptorW, i32,
            [ctypes.c_wchar_p, u32, ctypes.POINTER(vp), ctypes.POINTER(u32)])
        self.GetSecurityDescriptorSacl = self._fn(adv.GetSecurityDescriptorSacl, i32,
                                                  [vp, ctypes.POINTER(i32), ctypes.POINTER(vp), ctypes.POINTER(i32)])
        self.SetNamedSecurityInfoW = self._fn(adv.SetNamedSecurityInfoW, u32,
                                              [ctypes.c_wchar_p, i32, u32, vp, vp, vp, vp])

    @staticmethod
    def _fn(f: Any, restype: Any, argtypes: list[Any]) -> Any:
        f.restype = restype
        f.argtypes = argtypes
        return f

    @staticmethod
    def error(what: str) -> OSError:
        code = ctypes.get_last_error()  # type: ignore[attr-defined]
        return OSError(code, f"{what} failed (Windows error {code})")


_WIN: list[_Win] = []


def _win() -> _Win:
    if sys.platform != "win32":
        raise OSError(f"{sys.platform}: not Windows")
    if not _WIN:
        _WIN.append(_Win())
    return _WIN[0]


def _half_the_memory() -> int:
    """The daemon's job's cap for one worker: half the machine's memory (each run's own budget is the worker's
    nested job, worker/limits.py)."""
    import psutil

    try:
        return int(psutil.virtual_memory().total) // 2 or DEFAULT_MEMORY_BYTES
    except (OSError, RuntimeError):
        return DEFAULT_MEMORY_BYTES


def contain(process: int, memory_bytes: int) -> Any:
    """Put the process (a handle) in a new job object with `job_limits` and UI restrictions: the job's handle,
    which the caller keeps for the process's life (closing it kills the process)."""
    w = _win()
    job = w.CreateJobObjectW(None, None)
    if not job:
        raise w.error("CreateJobObjectW")
    info = job_limits(memory_bytes)
    ui = BasicUiRestrictions(JOB_OBJECT_UILIMIT_ALL)
    if not w.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(info),
                                     ctypes.sizeof(info)):
        err = w.error("SetInformationJobObject(limits)")
        w.CloseHandle(job)
        raise err
    if not w.SetInformationJobObject(job, JOB_OBJECT_BASIC_UI_RESTRICTIONS_CLASS, ctypes.byref(ui), ctypes.sizeof(ui)):
        err = w.error("SetInformationJobObject(UI restrictions)")
        w.CloseHandle(job)
        raise err
    if not w.AssignProcessToJobObject(job, process):
        err = w.error("AssignProcessToJobObject")
        w.CloseHandle(job)
        raise err
    return job


def lower_integrity(process: int) -> int:
    """Lower the process's primary token to low integrity, then read it back: the integrity RID it now has."""
    w = _win()
    token = ctypes.c_void_p()
    if not w.OpenProcessToken(process, TOKEN_ADJUST_DEFAULT | TOKEN_QUERY, ctypes.byref(token)):
        raise w.error("OpenProcessToken")
    try:
        sid = ctypes.create_string_buffer(LOW_INTEGRITY_SID, len(LOW_INTEGRITY_SID))
        tml = low_label(sid)
        if not w.SetTokenInformation(token, TOKEN_INTEGRITY_LEVEL_CLASS, ctypes.byref(tml),
                                     ctypes.sizeof(tml) + len(LOW_INTEGRITY_SID)):
            raise w.error("SetTokenInformation(TokenIntegrityLevel)")
        size = ctypes.c_uint32(0)
        buf = ctypes.create_string_buffer(256)
        if not w.GetTokenInformation(token, TOKEN_INTEGRITY_LEVEL_CLASS, buf, len(buf), ctypes.byref(size)):
            raise w.error("GetTokenInformation(TokenIntegrityLevel)")
        return integrity_rid(buf.raw, ctypes.addressof(buf))
    finally:
        w.CloseHandle(token)


def _privileges_of(w: _Win, token: Any) -> list[tuple[int, int, int]]:
    size = ctypes.c_uint32(0)
    w.GetTokenInformation(token, TOKEN_PRIVILEGES_CLASS, None, 0, ctypes.byref(size))  # asks the size
    buf = ctypes.create_string_buffer(max(int(size.value), 4))
    if not w.GetTokenInformation(token, TOKEN_PRIVILEGES_CLASS, buf, len(buf), ctypes.byref(size)):
        raise w.error("GetTokenInformation(TokenPrivileges)")
    return token_privileges(buf.raw)


def strip_privileges(process: int) -> list[int]:
    """Remove every privilege of the process's primary token but SeChangeNotifyPrivilege (for good: a removed
    privilege cannot be enabled again), then read them back: the LUIDs (low parts) left."""
    w = _win()
    token = ctypes.c_void_p()
    if not w.OpenProcessToken(process, TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY, ctypes.byref(token)):
        raise w.error("OpenProcessToken")
    try:
        change = removal(_privileges_of(w, token))
        if int.from_bytes(change[:4], "little"):
            buf = ctypes.create_string_buffer(change, len(change))
            ok = w.AdjustTokenPrivileges(token, 0, buf, 0, None, None)
            if not ok or ctypes.get_last_error() == ERROR_NOT_ALL_ASSIGNED:  # type: ignore[attr-defined]
                raise w.error("AdjustTokenPrivileges(SE_PRIVILEGE_REMOVED)")
        return [lo for lo, _, _ in _privileges_of(w, token)]
    finally:
        w.CloseHandle(token)


def set_label(path: str, sddl: str) -> None:
    """Set the mandatory label of `sddl` (a SACL-only descriptor) on a file or folder; inheritable labels also
    reach what is already in a folder (SetNamedSecurityInfo propagates them)."""
    w = _win()
    sd = ctypes.c_void_p()
    if not w.ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, ctypes.byref(sd), None):
        raise w.error("ConvertStringSecurityDescriptorToSecurityDescriptorW")
    try:
        present, defaulted, sacl = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_void_p()
        if not w.GetSecurityDescriptorSacl(sd, ctypes.byref(present), ctypes.byref(sacl), ctypes.byref(defaulted)):
            raise w.error("GetSecurityDescriptorSacl")
        rc = w.SetNamedSecurityInfoW(path, SE_FILE_OBJECT, LABEL_SECURITY_INFORMATION, None, None, None, sacl)
        if rc != 0:
            raise OSError(rc, f"SetNamedSecurityInfoW({path!r}) failed (Windows error {rc})")
    finally:
        w.LocalFree(sd)


def label_low(path: str) -> None:
    """Label a folder (and, inherited, what is made in it) low integrity: a low-integrity worker may write it."""
    set_label(path, LOW_LABEL_SDDL)


def hide_from_low(path: str) -> None:
    """Label a folder medium with no-read-up (inherited by its files): the user's own processes, at medium, read and
    write it as before; a low-integrity worker can neither list nor read it. For Jupyter's runtime folders."""
    set_label(path, NO_READ_UP_SDDL)


def _appdata_runtime(e: dict[str, str]) -> list[str]:
    appdata = e.get("APPDATA")
    return [os.path.join(appdata, "jupyter", "runtime")] if appdata else []


def jupyter_runtime_dirs(env: dict[str, str], own_env: dict[str, str] | None = None) -> list[str]:
    """The runtime folders (oslayer.jupyter_runtime_dirs) with Windows' default under `%APPDATA%`."""
    return _runtime_dirs(env, own_env, _appdata_runtime)


def temp_env(home: str) -> dict[str, str]:
    """The worker's temporary folder, inside its (low-labelled) home: the user's %TEMP% is medium integrity."""
    tmp = os.path.join(home, "tmp")
    return {"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp}


def system_env(env: dict[str, str]) -> dict[str, str]:
    """What any Windows process needs of the environment (the worker's is an allowlist): SYSTEMROOT, without which
    Python cannot even seed its hashes at startup."""
    root = next((e[k] for e in (env, os.environ) for k in ("SYSTEMROOT", "SystemRoot") if e.get(k)), None)
    return {"SYSTEMROOT": root} if root else {}


_AVAILABLE: dict[str, str | None] = {}


def available(executable: str) -> str | None:
    """A trial: `executable` started idle, put in its job and lowered to low integrity, then ended (once)."""
    if sys.platform != "win32":
        return f"{sys.platform}: job objects and integrity levels are Windows'"
    if executable in _AVAILABLE:
        return _AVAILABLE[executable]
    home = tempfile.mkdtemp(prefix="crane-tw-trial-")
    try:
        how = launch([executable, "-I", "-S", "-c", "import sys; sys.stdin.read()"], {}, home)
        proc = subprocess.Popen(how.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            why = started(how, proc).layer.why_not
        finally:
            release(how)
            proc.kill()
            proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
    except OSError as exc:
        why = f"a trial worker could not be started: {exc}"
    finally:
        shutil.rmtree(home, ignore_errors=True)
    _AVAILABLE[executable] = why
    return why


def layer(ran: bool, why_not: str | None = None) -> OsLayer:
    return OsLayer(NAME, "win32", CONFINES, ran, why_not)


def launch(argv: list[str], env: dict[str, str], home: str) -> Launch:
    """The worker's folder labelled low and its temporary folder put in it; the layer runs once it is `started`."""
    extra = {**system_env(env), **temp_env(home)}
    try:
        os.makedirs(extra["TMP"], exist_ok=True)
        label_low(home)
    except OSError as exc:
        why = f"the worker's folder could not be labelled low integrity: {exc}"
        return Launch(argv, system_env(env), layer(False, why))
    hidden = True
    for d in jupyter_runtime_dirs(env):
        if os.path.isdir(d):
            try:
                hide_from_low(d)
            except OSError:
                hidden = False  # (the layer then does not claim it)
    pending = layer(False, NOT_STARTED)
    if not hidden:
        pending = replace(pending, confines=tuple(c for c in CONFINES if c != RUNTIME))
    return Launch(argv, extra, pending)


def started(how: Launch, proc: subprocess.Popen) -> Launch:
    """The worker in its job, its privileges removed and at low integrity before it is sent anything; the layer
    ran only when all three held (else the worker is left to the daemon, which ends it: no run is said to be
    confined)."""
    if how.layer.why_not != NOT_STARTED:
        return how
    handle = getattr(proc, "_handle", None)
    if handle is None:
        how.layer = how.layer.failed("no process handle for the worker")
        return how
    try:
        how.handles.append(contain(int(handle), _half_the_memory()))
        left = strip_privileges(int(handle))
        rid = lower_integrity(int(handle))
    except OSError as exc:
        how.layer = how.layer.failed(str(exc))
        return how
    if [p for p in left if p != SE_CHANGE_NOTIFY_PRIVILEGE]:
        how.layer = how.layer.failed(f"the worker's token still has privileges {left} after their removal")
        return how
    if rid != SECURITY_MANDATORY_LOW_RID:
        how.layer = how.layer.failed(f"the worker's integrity reads back as {rid:#x}, not low")
        return how
    how.layer = replace(how.layer, ran=True, why_not=None)
    return how


def release(how: Launch) -> None:
    """The job's handle closed (the worker has ended; were it alive, this would end it)."""
    while how.handles:
        handle = how.handles.pop()
        if sys.platform == "win32":
            _win().CloseHandle(handle)


def prepare_folder(path: str) -> None:
    """A run folder labelled low: the worker writes its outputs there, and nowhere else."""
    label_low(path)

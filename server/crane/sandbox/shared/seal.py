"""The seal (issue 41; docs/sandbox.md, "Who writes the verdict"): made by a run's process, read by its parent.

Runs on every side: in the user's kernel and its forked children and in transplant workers (a part of
`_crane_sandbox`, before kernel/common.py), and in the daemon (copy_seal.py, assemble.py). Standard library only.
A process whose record (or reply) is out blocks in a raw read(2) whose unused argument registers carry
`SEAL_MAGIC`, a code saying how its cell (or command) ended — from CRANE's control flow — and the digest of every
byte CRANE wrote on the channel. Its parent reads that from outside in /proc/<pid>/syscall (`read_seal`) and
ends it, or answers it. No function of the standard library makes a raw system call with chosen registers: pure
Python cannot seal (ctypes can: docs/sandbox.md).
"""

from __future__ import annotations

import errno
import os
from hashlib import blake2b as _SEAL_HASH
from typing import Any, NoReturn

SEAL_MAGIC = 0x4352414E45534541
# how the cell or command ended: clean, raised, ended its process, changed CRANE's code, a record without a cell
SEAL_CLEAN, SEAL_RAISED, SEAL_ENDS, SEAL_TAMPERED, SEAL_RECORD = 1, 2, 3, 4, 5
# the exit code of a process whose cell changed CRANE's own code (or kept a signal handler set through the seal's
# signal step): it writes nothing and says so by how it ends (the fenced templates write it as a literal)
TAMPERED_EXIT = 87
SEAL_TRIES = 70  # passes of the signal step before a seal, until one runs no code of the cell's


def seal_digest(data: bytes) -> int:
    """The seal's digest of `data` (blake2b, 8 bytes, little-endian), by the hash bound when this module was loaded
    (never a `hashlib` a cell rebinds later)."""
    return int.from_bytes(_SEAL_HASH(data, digest_size=8).digest(), "little")


def read_seal(pid: int, refused: bool | None = None) -> tuple[int, int] | None | bool:
    """From outside (the parent): (code, digest) when a thread of process `pid` is in CRANE's sealed wait (the main
    thread's is looked at first; the cell may end its process from another thread); None when none is (running,
    elsewhere, gone); False when this process may not read its /proc/<pid>/syscall (EACCES/EPERM: Yama, an LSM).
    `refused` is what any other failed read of an existing process's file means: None (the kernel side: as if not
    sealed) or False (the daemon: unchecked, `copy_seal`)."""
    found = _seal_at(f"/proc/{pid}/syscall", refused)
    if found is not None:
        return found
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        if tid != str(pid):
            found = _seal_at(f"/proc/{pid}/task/{tid}/syscall", refused)
            if found:
                return found
    return None


def _seal_at(path: str, refused: bool | None) -> tuple[int, int] | None | bool:
    try:
        with open(path, "rb") as f:
            fields = f.read().split()
    except PermissionError:
        return False
    except OSError as exc:  # gone (ENOENT, ESRCH), or refused otherwise: the caller's `refused`
        return None if exc.errno in (errno.ENOENT, errno.ESRCH) else refused
    try:
        if len(fields) >= 7 and int(fields[0]) == 0 and int(fields[6], 16) == SEAL_MAGIC:
            return int(fields[4], 16), int(fields[5], 16)
    except ValueError:
        pass
    return None


def seal_call() -> dict[str, Any]:
    """How a sealed system call is made (kernel/run._c_seal says why), set up now from `_ctypes`' immutable C types
    alone: libc's `syscall` called through the C base's own call slot (`_ctypes.CFuncPtr.__call__`) on a pointer
    made at the call by the base's own `__new__` from a private pointer class without `argtypes`, `restype` or
    `errcheck`; 64-bit arguments made at the call by the metaclass's C `from_buffer_copy`. Keys: `<call>`, `<new>`,
    `<sealer>`, `<sc>`, `<copy>`, `<u64>`, `<to>`, `<order>`, `<mark>`. Raises where the C types are not immutable."""
    import _ctypes
    import sys

    base: Any = _ctypes.CFuncPtr
    simple: Any = _ctypes._SimpleCData
    copy = None
    klass: Any
    for klass in type(simple).__mro__:
        if "from_buffer_copy" in vars(klass):
            copy = vars(klass)["from_buffer_copy"]
            break
    immutable = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
    for klass in (base, type(base), simple, type(simple), type(copy)):
        if not klass.__flags__ & immutable:
            raise RuntimeError("ctypes' C types are not immutable here: the seal cannot be made out of a cell's reach")
    sealer = type(base)("_crane_sealer", (base,), {"_flags_": _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO})
    u64 = type(simple)("_crane_u64", (simple,), {"_type_": "Q"})
    at = _ctypes.dlsym(_ctypes.dlopen(None, _ctypes.RTLD_LOCAL), "syscall")  # type: ignore[arg-type]
    return {"<call>": vars(base)["__call__"], "<new>": vars(base)["__new__"], "<sealer>": sealer, "<sc>": at,
            "<copy>": copy, "<u64>": u64, "<to>": int.to_bytes, "<order>": sys.byteorder,
            "<mark>": SEAL_MAGIC.to_bytes(8, sys.byteorder)}


def quiet_parts() -> dict[str, Any]:
    """What stops a cell's signal handlers before a seal (kernel/run._quiet_constants says how), each a C callable or
    an immutable value bound now: rt_sigprocmask(2)'s number for this machine (`<nr_mask>`; SIG_BLOCK of `<all>`
    through `<byref>`), the signals as a tuple of ints, `_signal`'s own getsignal/signal and SIG_IGN, the C builtins
    the check is made with, and the C builtin the unraisable hook is set to (`<hook>`)."""
    import _ctypes
    import _signal
    import operator
    import signal
    import sys

    numbers = {"x86_64": 14, "aarch64": 135}  # rt_sigprocmask(2)'s number (asm/unistd_64.h; asm-generic/unistd.h)
    nr = numbers.get(os.uname().machine)
    if nr is None:
        raise RuntimeError("no rt_sigprocmask number known for this machine: the seal cannot block its signals")
    return {"<nr_mask>": nr, "<all>": b"\xff" * 8, "<byref>": _ctypes.byref,  # (SIG_BLOCK 0, a 64-bit sigset: 8)
            "<signals>": tuple(sorted(int(s) for s in signal.valid_signals())),
            "<getsignal>": _signal.getsignal, "<signal>": _signal.signal, "<ign>": int(signal.SIG_IGN),
            "<callable>": callable, "<any>": any, "<map>": map, "<sysdict>": vars(sys), "<get>": dict.get,
            "<setitem>": dict.__setitem__, "<hook>": id, "<is>": operator.is_}


# what `wait_sealed` runs on, in this order: bound by `bind_wait` before any cell (kernel/run._seal_constants)
_WAIT_KEYS = ("<call>", "<new>", "<sealer>", "<sc>", "<copy>", "<u64>", "<to>", "<order>", "<mark>", "<nr_mask>",
              "<all>", "<byref>", "<signals>", "<getsignal>", "<signal>", "<ign>", "<sysdict>", "<hook>", "<tries>",
              "<callable>", "<any>", "<map>", "<pipe>", "<write>", "<gc_off>", "<end>", "<tampered>", "<trace>", "<profile>",
              "<ident>", "<main>")
_WAIT: list[tuple[Any, ...]] = []


def bind_wait(parts: dict[str, Any]) -> None:
    """Keep what `wait_sealed` calls, taken from `parts` (a template's constants, kernel/run._seal_constants) before
    the cell runs, once per process: what the cell rebinds later (`os.pipe`, `sys.settrace`, a module of ctypes) is
    never what the wait calls. Called on the thread that runs the cell (Python's main thread there, where alone its
signal handlers run)."""
    if not _WAIT:
        import _thread
        import sys
        _WAIT.append(tuple({**parts, "<trace>": sys.settrace, "<profile>": sys.setprofile, "<ident>": _thread.get_ident,
                            "<main>": _thread.get_ident()}[k] for k in _WAIT_KEYS))


def _wait_parts() -> tuple[Any, ...]:
    """`bind_wait`'s parts, made now where nothing bound them (a record CRANE wrote before any cell ran)."""
    if not _WAIT:
        import gc
        import sys
        mod = sys.modules.get("posix")
        bind_wait({**seal_call(), **quiet_parts(), "<tries>": range(SEAL_TRIES), "<pipe>": os.pipe,
                   "<write>": os.write, "<gc_off>": gc.disable, "<end>": mod._exit if mod is not None else os._exit,
                   "<tampered>": TAMPERED_EXIT})
    return _WAIT[0]


def wait_sealed(code: int, digest: int, done_fd: int = -1) -> NoReturn:
    """Seal with `code` over `digest` and wait, for good, to be ended by the parent; `done_fd` (when >= 0) wakes
    the parent first (then it looks in /proc). Only the codes that say nothing of a cell's clean or raised end
    (kernel/common._seal_other). No code of the cell's runs in it (issue 41): its trace and profile hooks are
    stopped, then its signal handlers as before a clean or raised seal (kernel/run._quiet_constants: every signal
    blocked by a raw rt_sigprocmask(2), the unraisable hook a C builtin, every callable Python handler set to SIG_IGN,
    in passes until one finds none; tries run out or a handler raises between them: `_exit(87)`, TAMPERED), then
    the raw block again and the collector off; every system call is made as the other seals' (`seal_call`), through
    what `bind_wait` kept before the cell. The wait is made ready before the wake-up; no EINTR runs a handler. On
    another thread than the cell's main one (a thread of the cell's ends the process) only the raw block: Python runs
    its handlers on the main thread alone, and its `signal` refuses other threads."""
    (call, new, sealer, sc, copy, u64, to, order, mark, nr, every, byref, signals, getsignal, setsignal, ign, sysdict,
     hook, tries, is_callable, any_of, each, pipe, write, gc_off, end, tampered, trace, profile, ident,
     main) = _wait_parts()
    code = 0 + code if type(code) is int else SEAL_RECORD
    seal = copy(u64, to(0 + digest if type(digest) is int else 0, 8, order))
    trace(None)
    profile(None)
    try:  # (another thread of the cell's that ends the process seals on its own: no Python handler runs on it)
        for _ in tries if ident() == main else ():
            try:
                call(new(sealer, sc), nr, 0, byref(copy(u64, every)), 0, 8)
                sysdict["unraisablehook"] = hook
                for s in signals:
                    if is_callable(getsignal(s)):
                        setsignal(s, ign)
            except BaseException:  # noqa: BLE001, S110 - a handler of the cell's ran (and raised): checked below
                pass
            if any_of(each(is_callable, each(getsignal, signals))) is False and sysdict.get("unraisablehook") is hook:
                break
        else:  # (tries ran out: a handler of the cell's still set)
            if ident() == main:
                end(tampered)
    except BaseException:  # noqa: BLE001 - a handler of the cell's raised between the passes' `try`s
        end(tampered)
    call(new(sealer, sc), nr, 0, byref(copy(u64, every)), 0, 8)
    gc_off()
    r = pipe()[0]  # (a pipe's read end nobody writes: its write end stays open, so no EOF ends the wait)
    if done_fd >= 0:
        try:
            write(done_fd, b"d")
        except OSError:
            pass
    while True:
        call(new(sealer, sc), 0, r, 0, 1, code, seal, copy(u64, mark))

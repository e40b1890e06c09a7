"""Fork sandbox, kernel side: names every part shares (standard library only).

The sandbox's kernel-side parts (this folder, see its `__init__`) run INSIDE the user's kernel, where CRANE is not
installed: `channel.SANDBOX_MODULE` compiles them, in the order of `channel.SANDBOX_PARTS`, into one private
module (`_crane_sandbox`, installed by `crane.kernel.private_module`; the lines marked `# kernel: strip` — imports
between parts — are blanked). They bind no names in the user's namespace. The entry points (`start`, `session`,
`collect`, `stop`) are in `entry.py`. `_Ctx` is what a child set up, shared by the parts.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from crane.sandbox.shared.seal import (  # kernel: strip
    SEAL_ENDS,
    SEAL_RECORD,
    SEAL_TAMPERED,
    TAMPERED_EXIT,
    read_seal,
    seal_digest,
    wait_sealed,
)

CELL_FILENAME = "<crane-sandbox-cell>"
_CO_COROUTINE = 0x80
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxBlocked(PermissionError):
    """Raised inside the sandbox child when the cell attempts a side effect (audit-hook level)."""


def proc_kb(path: str, keys: tuple[str, ...]) -> dict:
    """The `keys` of a /proc "Key: value kB" file (/proc/meminfo, /proc/self/status), as ints (kB); missing
    keys are absent, an unreadable file gives {}."""
    out: dict = {}
    try:
        with open(path) as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in keys:
                    out[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


_MODULE_NAMESPACE = type.__dict__["__dict__"].__get__(type(os))["__dict__"]  # (C getters, bound at install)
_CLASS_NAMESPACE = type.__dict__["__dict__"]
_CLASS_MRO = type.__dict__["__mro__"]


def _summarise_data(data: Any, kind: str) -> dict:
    text = ""
    if isinstance(data, dict):
        text = str(data.get("text/plain", ""))
        mimes = sorted(str(k) for k in data)
    else:
        mimes = []
    return {"kind": kind, "text": text[:4000], "mimetypes": mimes[:10]}


def _write_json(fd: int, obj: dict) -> bytes:
    """Write `obj` as one JSON line on `fd`. On the run's channel (`_track_channel`) the line is counted before it
    is written, and the result is every byte CRANE meant to write there so far (the caller's to seal: a line that
    could not be delivered still counts, so the channel then never matches); elsewhere, the line."""
    data = (_json_text(obj) + "\n").encode("utf-8", "replace")  # (never through what a kept command changed)
    out = data
    if fd >= 0 and fd == _SEALED["fd"]:  # the run's channel: the seal names what CRANE wrote there
        out = _sent() + data
        _SEALED["sent"] = out
    view = data
    while view:
        try:
            view = view[os.write(fd, view):]
        except InterruptedError:
            continue
    return out


class _Capture(io.TextIOBase):
    """A text stream writing UTF-8 straight to a descriptor, keeping at most `limit` bytes."""

    def __init__(self, fd: int, name: str, limit: int) -> None:
        self._fd, self._name, self._left = fd, name, limit

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]  # io.TextIOBase declares a plain attribute
        return "UTF-8"  # (as ipykernel's OutStream spells it: a cell comparing it sees what the kernel shows)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def write(self, s: str) -> int:
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

    def flush(self) -> None:
        pass


_SETUP: dict = {}  # child only: what setup got to, for reporting a failure


class _Ctx:
    """Everything the child set up, for running code and writing the result."""

    def __init__(self, args: dict, shell: Any) -> None:
        self.args = args
        self.shell = shell
        self.result_fd = -1
        self.cmd_fd = -1
        self.done_fd = -1  # layered mode, B: tells A that the record is out (kernel/layer.supervise)
        self.handover: Any = None  # sessions: the socket pair over which the head hands its channel on
        self.displays: list[dict] = []
        self.denied: list[str] = []
        self.absorbed: list[str] = []  # side effects the sandbox let happen where nothing real sees them
        self.kernel_ppid = 0  # the kernel's parent (what `os.getppid()` returns in the kernel)
        self.confinement: dict = {}
        self.scratch = os.path.realpath(args["scratch"])
        self.mode = "blocking"  # or "layered" (kernel/layer.py)
        self.mode_reason: str | None = None
        self.places: list[str] = []  # layered: the directories with a private layer
        self.fds: dict = {}  # inherited descriptors by treatment (kernel/fds.py)
        self.mappings: dict = {}  # shared writable mappings by treatment (kernel/mappings.py)
        self.layer: dict = {}
        self.steps: dict = {}  # setup step -> ms
        self.kept: list[dict] = []  # miniature runs: what was shrunk (kernel/miniature.py)
        self.miniature_error: str | None = None
        self.notif_sock: Any = None  # layered mode, B: the socket to A that carries the seccomp listener
        self.cpu_before = 0.0  # layered mode, B: the CPU A spent on the setup before the clone
        self.memory_mb = 0
        self.stdout: _Capture | None = None
        self.stderr: _Capture | None = None
        self.shown_exc: BaseException | None = None
        self.displayhook: Callable[[object], None] | None = None  # the child's sys.displayhook
        self.audit_state: dict[str, Any] = {}  # set by the audit hook; "bypass": it lets everything through
        self.untraced = False  # CRANE's part runs untraced (`_untraced`): the cell's statements through call_tracing


# -- the seal (issue 41; docs/sandbox.md, "Who writes the verdict") ------------------------------------------------
# A one-shot run's record counts only when its process ends *sealed* (shared/seal.py): after writing it, CRANE's
# epilogue wakes its parent (`done_fd`) and blocks for good in a raw read(2) whose unused argument registers carry
# SEAL_MAGIC, a code saying how the cell ended (from CRANE's control flow) and a digest of every byte CRANE wrote on
# the channel. The parent (the kernel's reaper thread, or A in layered mode) sees that from outside in
# /proc/<pid>/syscall, ends the process itself and writes how it ended into the private directory, where the cell
# cannot write.
# What the seal names is never an object the cell could feed or replace: `_SEALED` holds the channel's number and
# the *bytes* CRANE wrote there (immutable), and the epilogue seals the digest of what `_write_json` returned for its
# own last line — CRANE's record or reply always at its end. A cell that rebinds `_SEALED["sent"]` only chooses what
# the seal says came before CRANE's line: either that is what the channel holds before it (extra lines: `blocked`)
# or the seal matches nothing; one that closes or replaces the channel leaves CRANE's line out of what the channel
# holds, never out of the digest (issue 41; tests/sandbox/test_sealed_state.py).
_SEALED: dict = {"fd": -1, "sent": b""}  # the run's channel and every byte CRANE wrote on it


def _track_channel(fd: int) -> None:
    """From now on `_write_json` counts what it writes on `fd`, from nothing."""
    _SEALED["fd"], _SEALED["sent"] = fd, b""


def _sent() -> bytes:
    """What CRANE wrote on the run's channel, as `_SEALED` says (a value that is not bytes names nothing)."""
    sent = _SEALED["sent"]
    return sent if type(sent) is bytes else b"\x00not CRANE's\n"


def _channel_digest(sent: bytes | None = None) -> int:
    """The seal's digest of `sent` (what `_write_json` returned for CRANE's last line), or of `_sent()`."""
    return seal_digest(_sent() if sent is None else sent)


def _wake_parent(ctx: _Ctx) -> None:
    """Tell the process that will check the seal that it is coming (then it looks in /proc)."""
    if ctx.done_fd >= 0:
        try:
            os.write(ctx.done_fd, b"d")
        except OSError:
            pass


def _seal_other(ctx: _Ctx, code: int) -> NoReturn:
    """Seal with `code` and wait to be ended; never returns. Only the codes that say nothing of a cell's own end:
    the cell ended its process, changed CRANE's code, or never ran (a record CRANE wrote without it). The two that
    do — clean, raised — are written out where the cell's end is (kernel/run._child_run), never here."""
    code = int(code) if code in (SEAL_ENDS, SEAL_TAMPERED) else SEAL_RECORD
    digest = _channel_digest()
    _close_channel(ctx)
    wait_sealed(code, digest, ctx.done_fd)


def _close_channel(ctx: _Ctx) -> None:
    if ctx.result_fd >= 0:
        try:
            os.close(ctx.result_fd)
        except OSError:
            pass
        ctx.result_fd = -1


def await_seal(pid: int, within_s: float, gone: Callable[[], bool] | None = None,
               spin_s: float = 0.0) -> tuple[int, int] | None | bool:
    """`read_seal`, again for up to `within_s` (the process wrote its wake-up just before entering the wait), or
    until `gone()` says the process has ended. For the first `spin_s` it looks again without sleeping, yielding the
    CPU in between (the process is a few instructions from its wait: a sleep would outlast it many times)."""
    import time
    now = time.monotonic()
    deadline, spin_until = now + within_s, now + spin_s
    pause = 0.0002
    while True:
        seal = read_seal(pid)
        now = time.monotonic()
        if seal is not None or now >= deadline or (gone is not None and gone()):
            return seal
        if now < spin_until:
            os.sched_yield()
            continue
        time.sleep(pause)
        pause = min(pause * 2, 0.002)


def ended_now(pid: int, within_s: float) -> bool:
    """Child `pid` has ended (it is not reaped here), or does within `within_s`."""
    import time
    deadline = time.monotonic() + within_s
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


_TAMPERED = TAMPERED_EXIT  # how a process whose code changed CRANE's own code (`_fence`) ends, writing nothing


def _json_codec() -> tuple[Any, Any, Any, Any] | None:
    """How a session's processes read and write their command and outcome lines (issue 41, round 13): `_json`'s C
    scanner and encoder, made here from immutable parts alone (a `SimpleNamespace` of builtins, the C string
    encoder), each called through its type's own C call slot taken now (`wrapper_descriptor`s). A kept clean
    command leaves its process as the next commands' head or worker, so whatever `json.loads`/`json.dumps` reach —
    `json._default_decoder`'s and `_default_encoder`'s attributes (`decode`, `scan_once`, `iterencode`), the heap
    types `_json.Scanner` and `_json.Encoder` (their `__call__` can be set, 3.11-3.13) — a command could change, and
    it did: a clean command whose decoder turned every later command's source into `pass` had every later crash come
    back `no-crash` (fork, portable and transplant sessions). Slots and objects made here read none of that (the
    scanner's and encoder's fields are read-only). None where the slots are not C ones (changed before CRANE came)."""
    import _json
    from types import SimpleNamespace

    slot = type(object.__init__)  # (wrapper_descriptor: a C slot, immutable)
    scanner_type, encoder_type = _json.make_scanner, _json.make_encoder
    scan = type.__dict__["__dict__"].__get__(scanner_type).get("__call__")
    encode = type.__dict__["__dict__"].__get__(encoder_type).get("__call__")
    if type(scan) is not slot or type(encode) is not slot:
        return None
    context: Any = SimpleNamespace(strict=True, object_hook=None, object_pairs_hook=None, parse_float=float,
                                   parse_int=int, parse_constant=float)
    scanner = scanner_type(context)
    encoder = encoder_type(None, str, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    return scan, scanner, encode, encoder


_JSON_LINES = _json_codec()


def _json_line(line: bytes | str) -> Any:
    """The one JSON value of `line` (surrounding whitespace aside), read through `_JSON_LINES`; ValueError when it
    is not exactly one."""
    codec = _JSON_LINES
    if codec is None:
        return json.loads(line)
    text: str = line.decode("utf-8") if isinstance(line, bytes) else line
    text = text.strip(" \t\r\n")
    try:
        value, end = codec[0](codec[1], text, 0)
    except StopIteration:  # (the C scanner's "no value here")
        raise ValueError("no JSON value") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def _json_text(value: Any) -> str:
    """`value` as JSON text (as `json.dumps(value, default=str)`), written through `_JSON_LINES`."""
    codec = _JSON_LINES
    if codec is None:
        return json.dumps(value, default=str)
    return "".join(codec[2](codec[3], value, 0))


def _real_exit() -> Callable[[int], Any]:
    """The platform's C-level `_exit` (posix, nt): bound before a cell runs, nothing the cell does can change it.
    Where kernel/audit._guard_process_end put its guard in its place (a session's command binds this after the
    hook is installed), the C function it keeps (`_C_EXITS`): CRANE's own end is never read as the cell's."""
    mod = sys.modules.get("posix") or sys.modules.get("nt")
    fn = mod._exit if mod is not None else os._exit
    if _c_exit(fn):
        return fn
    return next((f for f in _C_EXITS if _c_exit(f)), fn)


_C_EXITS: list = []  # the C `_exit` kernel/audit._guard_process_end replaced (only a real one is ever taken)


def _c_exit(fn: Any) -> bool:
    """`fn` is the C `_exit` of the posix or nt module (a builtin's `__name__` and `__self__` cannot be rebound)."""
    if type(fn) is not type(len):  # (first: an attribute read of any other object could run its hooks)
        return False
    owner = getattr(fn, "__self__", None)  # (a builtin function's: its C member)
    return fn.__name__ == "_exit" and type(owner) is type(os) and owner.__name__ in (
        "posix", "nt") and getattr(owner, "_exit", None) is not None


# the standard modules the outcome path calls (a rebound function there is a forged outcome in waiting)
_FENCED_MODULES = ("os", "posix", "posixpath", "genericpath", "json", "json.encoder", "json.decoder", "signal",
                   "traceback", "linecache", "re", "time", "io", "select", "socket")
# classes whose methods the outcome path calls (a fork session's head hands its channel on through the socket's
# methods: kernel/session._hand_over; `_json`'s C scanner makes a JSONDecodeError of a line it cannot read)
_FENCED_CLASSES = (("json.encoder", "JSONEncoder"), ("json.decoder", "JSONDecodeError"), ("socket", "socket"))
_IPYTHON_BUILTINS = frozenset(("display", "get_ipython", "exit", "quit", "help", "dreload", "copyright", "credits",
                               "license"))
_FENCE_GLOBALS = ("_FENCED_MODULES", "_FENCED_CLASSES", "_IPYTHON_BUILTINS")  # the module's names `_fence` reads


def _fence(space: dict | None = None, modules: dict | None = None, builtins_module: Any = None) -> frozenset:
    """What a command's outcome is made with, by identity: every global of CRANE's kernel-side module (functions
    by code, defaults and closure too, classes by attribute), the standard modules it calls and the builtins. A
    command whose code changed any of these is `blocked` and never kept (defence in depth: Python-level rebinding;
    see docs/sandbox.md for what it does not cover). Frozen (name, identity) pairs: `before <= fence()` holds while
    nothing watched was rebound or removed. The snapshot cannot be mutated by the code it watches (a dict could be
    found in CRANE's frame and updated to match what the code changed: tests/sandbox/test_sealed_state.py).
    It runs no code of the cell's (no attribute of an object it does not know the type of, no `isinstance` that
    could ask an object its `__class__`), so none can rebind what it already looked at; given `space` (CRANE's
    module's globals), `modules` (`sys.modules`) and `builtins_module` it imports and looks up nothing: a one-shot
    run calls its code with fresh globals and builtins (kernel/run._fenced_run)."""
    if space is None:
        import builtins as builtins_module
        import sys
        space, modules = globals(), sys.modules
    type_dict = type.__dict__["__dict__"].__get__  # a class's own namespace (no metaclass's `__dict__` asked)
    function, module = type(lambda: None), type(builtins_module)
    out: dict = {}
    # (a name that is not exactly a `str` is one the code added: never in the snapshot, and never hashed here)
    for name, value in list(space.items()):
        if type(name) is not str:
            continue
        out[name] = id(value)
        kind = type(value)
        if issubclass(kind, type):
            where = type_dict(value).get("__module__")
            if type(where) is str and where == __name__:
                for attr, member in list(type_dict(value).items()):
                    if type(attr) is str:
                        out[f"{name}.{attr}"] = id(member)
        elif kind is function:
            cells = []
            for c in value.__closure__ or ():
                try:
                    cells.append(id(c.cell_contents))
                except ValueError:  # (an empty cell)
                    pass
            out[name + ".code"] = (id(value.__code__), id(value.__defaults__), id(value.__kwdefaults__), tuple(cells))
    for mod in _FENCED_MODULES:
        m = modules.get(mod)  # type: ignore[union-attr]
        if m is not None:
            out[mod] = id(m)
            if type(m) is module:  # (another object in its place already fails the check)
                for attr, member in list(vars(m).items()):
                    if type(attr) is str and callable(member) and not attr.startswith("__"):
                        out[f"{mod}.{attr}"] = id(member)  # (constants cannot be rebound into code)
    for mod, cls in _FENCED_CLASSES:
        m = modules.get(mod)  # type: ignore[union-attr]
        klass = vars(m).get(cls) if type(m) is module else None
        if klass is not None and issubclass(type(klass), type):
            for attr, member in list(type_dict(klass).items()):
                if type(attr) is str:
                    out[f"{mod}.{cls}.{attr}"] = id(member)
    for attr, member in list(vars(builtins_module).items()):
        if type(attr) is str and not attr.startswith("_") and attr not in _IPYTHON_BUILTINS:
            out[f"builtins.{attr}"] = id(member)
    bound = space.get("_BOUND")  # (kernel/session: what a session's commands are stopped and sealed with)
    if type(bound) is dict:
        out["_BOUND#"] = len(bound)
        for key, member in list(bound.items()):
            if type(key) is str:
                out[f"_BOUND.{key}"] = id(member)
    return frozenset(out.items())


def _fence_shape() -> None:
    """(a plain function: `_fence` compares types with this one's)"""


def _untraced(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, called from inside a trace function (CPython counts the thread as tracing meanwhile:
    `PyThreadState_EnterTracing`): no trace, profile or `sys.monitoring` event fires for any frame while it runs,
    whatever hooks are set, so no hook can run in its frames nor write their locals back (a trace function's
    `f_locals` write-back, 3.11/3.12). Only what it hands to `sys.call_tracing` (the cell: kernel/run._exec_plan)
    runs with the count at 0, and the count is back when that returns or raises, before any frame of CRANE's
    resumes. Its value is returned, its exception raised."""
    box: list = []

    def enter(frame: Any, event: str, arg: Any) -> None:
        sys.settrace(None)
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - passed on below
            box.append((False, exc))

    sys.settrace(enter)
    _fence_shape()  # (its 'call' event runs `enter`)
    sys.settrace(None)
    if not box:
        raise RuntimeError("the untraced call did not run")
    ok, value = box.pop()
    if not ok:
        raise value
    return value


class _Watch:
    """What `_fence` covers, taken once and checked by identity: a session's head takes it before it forks a
    command's process, which inherits it, so the check after a command is a C-speed pass (~0.1 ms) and the objects
    are held (no address is reused). Also caught: any name added to CRANE's module, its classes or its private
    builtins (`shield.BUILTINS`), and a builtin's name added to a fenced standard module (either shadows a builtin
    that code calls)."""

    def __init__(self) -> None:
        import builtins
        import operator
        ours = globals()
        self.spaces: list[tuple[Any, tuple, tuple, int, frozenset | None]] = []
        attrs: list[tuple[Any, str, Any]] = []  # (function, attribute, its object)
        cells: list[tuple[Any, Any]] = []  # (closure cell, its contents)
        self._add(ours, list(ours), strict=True)
        private = ours.get("__builtins__")
        if type(private) is dict:  # shield.BUILTINS: the builtins CRANE's own code calls
            self._add(private, list(private), strict=True)
        for value in list(ours.values()):
            if isinstance(value, type) and value.__module__ == __name__:
                self._add(vars(value), list(vars(value)), strict=True)
            elif type(value).__name__ == "function":
                attrs += [(value, name, getattr(value, name)) for name in ("__code__", "__defaults__",
                                                                             "__kwdefaults__")]
                cells += [(c, c.cell_contents) for c in value.__closure__ or () if _filled(c)]
        self._add(sys.modules, [mod for mod in _FENCED_MODULES if mod in sys.modules], open_=True)
        for mod in _FENCED_MODULES:
            m = sys.modules.get(mod)
            if m is not None:
                space = vars(m)
                self._add(space, [k for k, v in list(space.items()) if callable(v) and not k.startswith("__")])
        for mod, cls in _FENCED_CLASSES:
            klass = getattr(sys.modules.get(mod), cls, None)
            if klass is not None:
                self._add(vars(klass), list(vars(klass)), strict=True)
        space = vars(builtins)
        self.shadow = frozenset(space)
        self._add(space, [k for k in list(space) if not k.startswith("_") and k not in _IPYTHON_BUILTINS], open_=True)
        self.attrs = tuple(zip(*attrs, strict=True)) or ((), (), ())  # (functions, attribute names, their objects)
        self.cells = tuple(zip(*cells, strict=True)) or ((), ())  # (closure cells, their contents)
        # what the check calls, bound now (a name the code adds to CRANE's module or its builtins never reaches it)
        self.is_, self.all_, self.map_, self.len_, self.getattr_ = operator.is_, all, map, len, getattr
        self.contents_, self.frozenset_ = operator.attrgetter("cell_contents"), frozenset

    def also(self, space: dict) -> None:
        """Watch every entry of `space` too, strictly (a fork session's `_BOUND`, once bound: the functions that stop
        a command's hooks, its sealed read, the digest, this watch)."""
        self._add(space, list(space), strict=True)

    def _add(self, space: Any, keys: list, strict: bool = False, open_: bool = False) -> None:
        """Watch `keys` of `space`; its size too: `strict`, no name may be added; else (a standard module) no
        builtin's name; `open_`: additions are not watched."""
        names = None if strict or open_ else frozenset(space)
        self.spaces.append((space, tuple(keys), tuple(space[k] for k in keys), -1 if open_ else len(space), names))

    def tampered(self) -> bool:
        """Whether anything watched was rebound, removed or shadowed since the watch was taken."""
        is_, all_, map_, len_, getattr_ = self.is_, self.all_, self.map_, self.len_, self.getattr_
        for space, keys, objects, size, names in self.spaces:
            if not all_(map_(is_, map_(space.get, keys), objects)):
                return True
            if size >= 0 and len_(space) != size:
                if names is None or not self.shadow.isdisjoint(self.frozenset_(space) - names):
                    return True
        fns, attrs, objects = self.attrs
        if not all_(map_(is_, map_(getattr_, fns, attrs), objects)):
            return True
        cells, objects = self.cells
        try:
            return not all_(map_(is_, map_(self.contents_, cells), objects))
        except ValueError:  # a cell emptied
            return True


def _filled(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True

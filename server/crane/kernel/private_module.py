"""Private kernel-side modules: stdlib-only source bundles CRANE installs in a kernel and calls privately.

The runtime-facts probe (`crane.probe`) and the fork sandbox (`crane.sandbox`) each run code INSIDE the user's
kernel, where CRANE is not installed. A `KernelModule` is such a bundle: source files in order, compiled one by
one into the same fresh module object, registered as `sys.modules[name]` with `VERSION` (a hash of the sources).
It binds no name in the user's namespace and runs no user code.

Both directions go through one silent request (`silent=True, store_history=False`) and its `user_expressions`:
the execution count, `In`/`Out` and the outputs other clients see are untouched (iopub carries busy/idle only).

- install: one expression that reads no name (the request is evaluated in the notebook's namespace: `exec`,
  `compile`, `getattr`, `__import__` there, or in builtins the notebook replaced, would be called before any frame
  of CRANE's runs): from literals, by C-level descriptors alone, it reaches the interpreter's `sys` (through the
  builtins module's `__spec__` and the frozen import machinery's namespace, proven by `sys.getprofile` being a C
  function bound to it), proves `exec` and `compile` the builtins module's own C functions, and runs the bootstrap
  with empty builtins and only those proven objects; the bootstrap proves `sys`'s hook functions, turns the user's
  profile/trace hooks off meanwhile, creates the module (sources compiled under `<crane-kernel/PATH>` names, so
  kernel-side tracebacks point at the real file and line; its `__builtins__` the interpreter's) and registers it
  in the table. Its value is None, or why it refused (a str: something on that path is not the interpreter's);
- call: `<module>.<function>(*args)` when the installed module has our VERSION and is the very module this
  process's install made (its address, `object.__repr__`, as that install reported it), else a sentinel, the module
  found the same way (no name read); on the sentinel (the kernel restarted, another CRANE installed its own, or the
  notebook put a module of its own, with our VERSION, at that name) `ModuleClient` installs and calls again once.
  A module this process has not installed is never called (the first call installs). Not proven: that the notebook
  did not free CRANE's module and make another at the same address.

Cross-part imports in the sources (`from crane.probe.kernel.common import x  # kernel: strip`) keep the parts
importable and type-checked in the daemon; each such line is blanked before sending (line numbers stay true).
Every reply is a Python literal (`repr` of builtins), decoded by `client.literal_value` (`ast.literal_eval`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crane.kernel.client import KernelConnection, literal_value
from crane.kernel.errors import KernelDead, KernelError, KernelTimeout

STRIP_MARK = "# kernel: strip"
_PACKAGE = Path(__file__).resolve().parents[1]  # server/crane
MISSING = "__crane_module_missing__"

# The interpreter's own `sys` and tables, reached from literals by C-level descriptors alone: these expressions are
# evaluated in the user's namespace, so a name in them (`exec`, `compile`, `__import__`, `getattr`) would be looked up
# in the notebook's namespace and builtins (which the notebook may have replaced) before any frame of CRANE's runs.
# `(lambda: 0).__builtins__` is the builtins the request runs with; the `sys` module is found from the builtins
# module's `__spec__` (its class's `__init__`'s globals: the frozen import machinery's namespace) and proven by its
# own C function (`getprofile`, bound to it under that name); its module table is `sys.__dict__['modules']` (a dict,
# or a subclass the notebook rebound it to: read and written by dict's own C methods, never its own). The value:
# (type, builtin_function_or_method, the builtins' dict, sys, sys's namespace, the module table, the module type), or
# False when any step finds anything else (the notebook replaced what the chain goes through).
_SYS_EXPR = (
    "(lambda T, D, FT, BF, DT: T(D) is DT "
    "and T(init := T.__dict__['__dict__'].__get__(T(D.get('__spec__'))).get('__init__')) is FT "
    "and T(G := FT.__dict__['__globals__'].__get__(init)) is DT "
    "and not T.__dict__['__flags__'].__get__(MT := T(S := G.get('sys'))) & 512 "
    "and T.__dict__['__name__'].__get__(MT) == 'module' "
    "and T(SD := T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__(S)) is DT "
    "and T(gp := SD.get('getprofile')) is BF and BF.__dict__['__self__'].__get__(gp) is S "
    "and BF.__dict__['__name__'].__get__(gp) == 'getprofile' "
    "and T.__dict__['__subclasscheck__'](DT, T(M := SD.get('modules'))) and (T, BF, D, S, SD, M, MT))"
    "(().__class__.__class__, (lambda: 0).__builtins__, (lambda: 0).__class__, "
    "().__class__.__class__(().__class__.__base__.__subclasses__), {}.__class__)"
)
# `NAME`'s module in the table when it is a plain module holding `VERSION` (an exact str) and, where the daemon
# installed it itself (`ADDR`), the very object that install made: `object.__repr__` (a static type's slot, which the
# notebook cannot replace) names the object's address; else None
_HELD_EXPR = (
    "(lambda T, BF, D, S, SD, M, MT: (lambda m: m if T(m) is MT and "
    "T(v := T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__(m).get('VERSION')) is ''.__class__ "
    "and v == @VER@@ADDR@ else None)"
    "({}.__class__.get(M, @NAME@)))(*P)"
)
# the address of a held module (`object.__repr__`), which the daemon keeps for its later requests
_ADDR_EXPR = "(lambda m: ().__class__.__base__.__repr__(m) if m is not None else None)(@HELD@)"
# The install: `exec` and `compile` of the builtins, proven the interpreter's own (C functions bound to the module
# whose namespace those builtins are, under their own names), run the bootstrap below on an empty builtins dict with
# only what was proven; the value is None once installed, else why not (a str).
_INSTALL_EXPR = (
    "(lambda P: (lambda T, BF, D, S, SD, M, MT: (lambda e, c, own: "
    "e(c(@BOOT@, '<crane-kernel/bootstrap>', 'exec', 0, True), g := {'__builtins__': {}, 'T': T, 'BF': BF, 'D': D, "
    "'S': S, 'SD': SD, 'MODULES': M, 'MT': MT, 'E': e, 'C': c, 'R': None, 'SRC': @SRC@, 'VER': @VER@, "
    "'NAME': @NAME@, 'DOC': @DOC@}) or g['R'] if own(e, 'exec') and own(c, 'compile') else "
    "'the notebook replaced `builtins.' + ('compile' if own(e, 'exec') else 'exec') + '` (not the interpreter\\'s "
    "own) before CRANE\\'s first export or probe: CRANE\\'s private module is not installed in this kernel (it would "
    "call that code)')"
    "(D.get('exec'), D.get('compile'), lambda f, n: T(f) is BF and BF.__dict__['__name__'].__get__(f) == n "
    "and T(b := BF.__dict__['__self__'].__get__(f)) is MT "
    "and T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__(b) is D))(*P) if P else "
    "'the notebook replaced what leads to the interpreter\\'s `sys` (its builtins\\' `__spec__`, the import "
    "machinery\\'s namespace, `sys.getprofile`) before CRANE\\'s first export or probe: CRANE\\'s private module is "
    "not installed in this kernel (it would call that code)')(@SYS@)"
)
# Runs with no builtins: every name is one the install expression gave, proven there (`sys`'s hook functions here).
_BOOTSTRAP = """
for _n in ("getprofile", "gettrace", "setprofile", "settrace"):
    _f = SD.get(_n)
    if not (T(_f) is BF and BF.__dict__["__self__"].__get__(_f) is S and BF.__dict__["__name__"].__get__(_f) == _n):
        R = "the notebook replaced `sys." + _n + "` (not the interpreter's own) before CRANE's first export or " \\
            "probe: CRANE's private module is not installed in this kernel (it would call that code)"
if R is None:
    _gp, _gt, _sp, _st = SD["getprofile"], SD["gettrace"], SD["setprofile"], SD["settrace"]
    _hooks = (_gp(), _gt())
    _sp(None)
    _st(None)
    try:
        _m = MT(NAME, DOC)
        _md = T.__dict__["__dict__"].__get__(MT)["__dict__"].__get__(_m)
        _md["__file__"] = "<crane-kernel>"
        _md["__builtins__"] = D
        for _f, _c in SRC:
            E(C(_c, _f, "exec"), _md)
        _md["VERSION"] = VER
        {}.__class__.__setitem__(MODULES, NAME, _m)
    finally:
        _st(_hooks[1])
        _sp(_hooks[0])
"""


class KernelModuleError(KernelError):
    """A private kernel-side module could not be installed or called, or its answer did not decode."""


def strip_marked(text: str) -> str:
    """The part's text with the `# kernel: strip` lines blanked (so line numbers stay the file's own); a marked
    line that opens a parenthesised import is blanked through its closing parenthesis."""
    out = []
    in_import = False
    for ln in text.splitlines():
        if in_import:
            out.append("")
            in_import = ")" not in ln.split("#", 1)[0]
        elif ln.rstrip().endswith(STRIP_MARK):
            out.append("")
            code = ln.split("#", 1)[0]
            in_import = code.count("(") > code.count(")")
        else:
            out.append(ln)
    return "\n".join(out) + "\n"


def _shown_path(path: Path) -> str:
    """A part's name in kernel-side tracebacks: its path inside the crane package (`sandbox/kernel/run.py`), so
    two folders' parts of the same file name stay apart; the file name for a part from elsewhere (cloudpickle)."""
    try:
        return path.resolve().relative_to(_PACKAGE).as_posix()
    except ValueError:
        return path.name


class KernelModule:
    """A bundle of stdlib-only source files installed in a kernel as `sys.modules[name]`."""

    def __init__(self, name: str, doc: str, files: Sequence[Path]):
        self.name = name
        self.doc = doc
        self.files = tuple(files)

    @functools.cached_property
    def sources(self) -> tuple[tuple[str, str], ...]:
        """(filename for tracebacks, text) of every part, in execution order."""
        return tuple((f"<crane-kernel/{_shown_path(p)}>", strip_marked(p.read_text(encoding="utf-8"))) for p in self.files)

    @functools.cached_property
    def version(self) -> str:
        digest = hashlib.sha1()
        for filename, text in self.sources:
            digest.update(filename.encode() + b"\0" + text.encode("utf-8") + b"\0")
        return digest.hexdigest()[:16]

    def _filled(self, template: str, **names: str) -> str:
        """`template` with each `@KEY@` replaced by `names[KEY]` (in one pass: what is put in is not read again)."""
        return re.sub(r"@([A-Z]+)@", lambda m: names[m.group(1)], template)

    def install_expression(self) -> str:
        """The install request: None once installed, else why not (a str); no name of the notebook's is read."""
        return self._filled(_INSTALL_EXPR, SYS=_SYS_EXPR, BOOT=repr(_BOOTSTRAP), SRC=repr(self.sources),
                            VER=repr(self.version), NAME=repr(self.name), DOC=repr(self.doc))

    def _held(self, addr: str | None = None) -> str:
        """`(lambda P: <our module, or None> if P else None)(SYS)`: the installed module of our version (and, given
        `addr`, the very module the install that answered `addr` made)."""
        check = "" if addr is None else f" and ().__class__.__base__.__repr__(m) == {addr!r}"
        held = self._filled(_HELD_EXPR, VER=repr(self.version), NAME=repr(self.name), ADDR=check)
        return f"(lambda P: {held} if P else None)({_SYS_EXPR})"

    def version_expression(self, addr: str | None = None) -> str:
        """Our VERSION when our module of that version is installed (given `addr`: the module that install made),
        else None."""
        return f"(lambda m: {self.version!r} if m is not None else None)({self._held(addr)})"

    def address_expression(self) -> str:
        """The address of our module of our version (`object.__repr__`), or None."""
        return self._filled(_ADDR_EXPR, HELD=self._held())

    def call_expression(self, function: str, *args: Any, addr: str | None = None) -> str:
        """`<module>.<function>(*args)` when the installed module has our version (given `addr`: is the module the
        install that answered `addr` made), else the MISSING sentinel. Arguments must be Python literals (their
        `repr` is sent); no name of the notebook's is read."""
        arglist = ", ".join(repr(a) for a in args)
        return f"(lambda m: m.{function}({arglist}) if m is not None else {MISSING!r})({self._held(addr)})"


# kernel -> {module name: the address (`object.__repr__`) of the module this process's last install of it made}:
# a module found at that name is called only when it is that very object (never a module the notebook made and
# filled with our VERSION). Kept per kernel, so the connections one process holds to it (the language server's
# attachment, its background runs, an agent's fix run) share one install instead of installing over each other
# at every alternation; by connection where the kernel is known by no file or server id (a kernel CRANE started)
_INSTALLED: weakref.WeakKeyDictionary[KernelConnection, dict[str, str]] = weakref.WeakKeyDictionary()
_INSTALLED_IN: dict[tuple[str | None, str | None, str | None], dict[str, str]] = {}


def _installed(conn: KernelConnection) -> dict[str, str]:
    """This process's installs in the kernel `conn` reaches: {module name: address}."""
    target = conn.target
    if target is None:
        return _INSTALLED.setdefault(conn, {})
    key = (os.path.realpath(target.connection_file) if target.connection_file else None,
           target.server.url if target.server is not None else None, target.kernel_id)
    return _INSTALLED_IN.setdefault(key, {})


class ModuleClient:
    """Calls one `KernelModule` in one kernel through a `KernelConnection`, installing it when needed: a module of
    our version that this process did not install itself (a notebook's impersonation, another CRANE's) is installed
    over, never called."""

    def __init__(self, conn: KernelConnection, module: KernelModule, error: type[KernelError] = KernelModuleError):
        self.conn = conn
        self.module = module
        self.error = error
        self.installs = 0  # how many times this client installed the module where none was: a rise means a fresh kernel
        self.replaced = 0  # how many times it installed over a module of our version it had not made

    @property
    def address(self) -> str | None:
        """The address of the module this process installed in this kernel last (None: none yet)."""
        return _installed(self.conn).get(self.module.name)

    def version_expression(self) -> str:
        """Our VERSION when the module this process installed is there, else None (`KernelModule`'s)."""
        addr = self.address
        return self.module.version_expression(addr) if addr is not None else "None"

    def evaluate(self, expressions: dict[str, str], timeout: float, what: str) -> dict[str, Any]:
        """Evaluate `expressions` in one private request; the raw `user_expressions` entries."""
        try:
            reply = self.conn.private(expressions, timeout=timeout)
        except KernelTimeout as exc:
            raise KernelTimeout(
                f"{what}: no reply within {timeout:g} s (the kernel is busy running a cell, or stuck)"
            ) from exc
        except KernelDead as exc:
            raise KernelDead(f"{what}: the kernel died ({exc})") from exc
        if reply.status != "ok":
            raise self.error(f"{what}: the kernel answered {reply.status}: {reply.ename}: {reply.evalue}")
        return reply.user_expressions

    def ensure_installed(self, timeout: float = 10.0) -> None:
        """Install (or replace) the module in the kernel, privately; check that our version answers. `installs`
        counts an install where no module of our version was there (a fresh kernel), `replaced` one over a module of
        our version this process did not make (another CRANE's, or the notebook's)."""
        what = f"installing {self.module.name}"
        out = self.evaluate(  # (evaluated in this order: `before` reads the table before the install)
            {"before": self.module.version_expression(), "install": self.module.install_expression(),
             "version": self.module.version_expression(), "address": self.module.address_expression()}, timeout, what
        )
        refused = literal_value(out.get("install"), what, self.error)
        if refused is not None:
            raise self.error(f"{what}: {refused}")
        version = literal_value(out.get("version"), what, self.error)
        if version != self.module.version:
            raise self.error(f"{what}: the kernel reports version {version!r}, expected {self.module.version!r}")
        addr = literal_value(out.get("address"), what, self.error)
        if type(addr) is not str:
            raise self.error(f"{what}: the kernel reports no module at {self.module.name!r} right after installing it")
        _installed(self.conn)[self.module.name] = addr
        if literal_value(out.get("before"), what, self.error) == self.module.version:
            self.replaced += 1
        else:
            self.installs += 1

    def call(self, function: str, *args: Any, timeout: float, what: str, also: Sequence[ModuleClient] = ()) -> Any:
        """`<module>.<function>(*args)` in the kernel, privately; its literal result. `also`: modules of the same
        kernel the function uses (the export's private cloudpickle), each checked in the same request to be the
        one this process installed (a module put in its place between two requests is never used)."""
        clients = (self, *also)
        for attempt in (0, 1):
            for c in clients:
                if c.address is None:  # (never a module this process did not install: installed first)
                    c.ensure_installed(timeout=max(timeout, 10.0))
            expr = self.module.call_expression(function, *args, addr=self.address)
            for c in also:
                expr = f"(lambda o: {expr} if o is not None else {MISSING!r})({c.module._held(c.address)})"
            out = self.evaluate({"r": expr}, timeout, what)
            value = literal_value(out.get("r"), what, self.error)
            if value != MISSING:
                return value
            if attempt:
                raise self.error(f"{what}: the module {self.module.name} vanished right after it was installed")
            held = self.evaluate({str(i): c.version_expression() for i, c in enumerate(clients)}, timeout, what)
            for i, c in enumerate(clients):
                if literal_value(held.get(str(i)), what, self.error) != c.module.version:
                    c.ensure_installed(timeout=max(timeout, 10.0))
        raise AssertionError("unreachable")

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
  with empty builtins and only those proven objects; the bootstrap turns the collector off (`gc`'s own functions,
  or where `gc` is not loaded a private instance of it from `_imp.create_builtin`) and the user's profile/trace
  hooks off (proven `sys`'s) before it calls or allocates anything, creates the module (sources compiled under
  `<crane-kernel/PATH>` names, so kernel-side tracebacks point at the real file and line; its `__builtins__` the
  interpreter's), seals it and registers it in the table. Its value is ('sealed', the seal's three addresses), or
  why it refused (a str: something on that path is not the interpreter's);
- the seal: a weak reference to the module, rooted for the process's life by an `atexit` entry (`type(seal)` at
  exit: harmless), so no other object is at its address while that root holds. Nothing of it can be rebound: its
  callback (read-only) is a tuple's `count`; the tuple (the holder) holds one code object, `_seal`'s, compiled
  with no builtins, whose constants hold the snapshot of what the module binds (tuples, kept in a bound method so
  that creating the code object does not swap a key for the interned string of the same text: each name and
  value, each function's code, defaults and keyword defaults, then the same for the module's own classes' names;
  compared by identity, `__crane_seal__` and `__warningregistry__` aside) and every tool the check calls (the
  interpreter's hook and collector switches, C getters, the weak reference type, `atexit.register`). The code reads
  no global, no closure cell and no default: a function made afresh from it (`FT(code, {'__builtins__': {}})`) is
  the install's whatever the notebook does, and a tuple, a code object and its constants' tuples cannot be
  changed from Python. The install answers the addresses (`object.__repr__`, a static slot) of the seal, the
  holder and the code object (`Seal`); the daemon keeps them per kernel. Sealing again is op 2 of that code: a new
  seal (new addresses) that only a request of this process can tell the daemon about: the export re-seals CRANE's
  cloudpickle after CRANE's own change to it and its reply carries the new addresses (kernel/pickling._cloudpickle,
  `ExportReply.cp_seal`, `ModuleClient.adopt`); a notebook that calls op 2 gets a seal the daemon does not know;
- call: `<module>.<function>(*args)` when the installed module has our VERSION and its `__crane_seal__` is of the
  interpreter's own weak reference type (a static type named `ReferenceType`, read by C getters before anything
  else of it: a subclass whose `object.__repr__` reads the same is refused), at the seal's address, refers to that
  module, its callback is a `builtin_function_or_method` bound to an exact tuple at the holder's address of one
  item, a code object at the code's address; then a function made afresh from that code object checks, with the
  user's hooks and the collector off, that the module binds what the snapshot holds and, for a `quiet` module,
  calls the function with both still off (the fork sandbox's, not quiet, hands the function back for the request
  to call with both as the notebook set them). Else a sentinel, the module found the same way (no name read); on
  the sentinel (the kernel restarted, another CRANE installed its own, the notebook put a module of its own at that
  name — even at a freed module's address, its namespace and seal copied — rebound a function, a class's method or
  a code object in ours, or went after the seal: `tests/kernel/test_seal_forgery.py`) `ModuleClient` installs and
  calls again once. A module this process has not installed is never called (the first call installs).

  What the seal proves: the module is the object this process's install made (or CRANE's own re-seal named) and
  binds, object for object, what that install left, as long as the seal's root holds. Not proven: a notebook that
  drops every reference to the seal (`atexit._clear()` and the module's `__crane_seal__`), frees it, its holder and
  its code object, and then gets objects of its own made at each of the three freed addresses (a search loop per
  address; pure Python has no root a notebook cannot drop: atexit's, the at-fork lists and any container are
  reachable through `gc`), or that writes memory (ctypes). Dropping the root alone, a weak reference of the
  notebook's at the freed seal's address (with its own holder, or the genuine one), or a subclass there, is
  refused. Also not proven: mutable containers inside the module (a list or dict CRANE's code reads), the contents
  of closure cells and of keyword-defaults dicts, the functions inside `staticmethod`/`classmethod`/`property`
  wrappers, a key of the notebook's (a `str` subclass with a colliding hash) put in the module's namespace, whose
  `__eq__` the expression's `.get('VERSION')` would call before the snapshot sees it; and the request's own first
  steps (IPython's handling of it, its top-level frame up to the trace call) may still let the collector run.
  A quiet module's request runs inside a trace call of its own (kernel/hooks_off.py: `ModuleClient.evaluate`), so
  no trace, profile or `sys.monitoring` hook nor `gc.callbacks` entry of the notebook's sees or rewrites its
  frames; hooks are on in its top-level frame before that call and after it returns (see there).

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
from typing import Any, NamedTuple

from crane.kernel.client import KernelConnection, literal_value
from crane.kernel.errors import KernelDead, KernelError, KernelNotStarted, KernelTimeout
from crane.kernel.hooks_off import guarded

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
SYS_EXPR = (
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
# installed it itself (`ADDR`: `_SEAL_ID`), the very object that install made, binding what it left: `THEN` (the
# module, or the call of it), else `ELSE`.
_HELD_EXPR = (
    "(lambda T, BF, D, S, SD, M, MT: (lambda m: @THEN@ if T(m) is MT and "
    "T(v := T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__(m).get('VERSION')) is ''.__class__ "
    "and v == @VER@@ADDR@ else @ELSE@)"
    "({}.__class__.get(M, @NAME@)))(*P)"
)
# The seal (made by the bootstrap below, `_seal` op 2) is a weak reference to the module that the install roots for
# the process's life (an `atexit` entry), so no other object has its address while that root holds: the module's
# `__crane_seal__` of the interpreter's own weak reference type (a static type: read by C getters, no lookup, before
# anything else of it is read) at the address the install answered (`object.__repr__`, a static type's slot, which
# the notebook cannot replace) referring to the module; its callback a tuple's `count`, the tuple (of one item: the
# seal's code object) and that code object at the addresses the install answered. A tuple and a code object are
# immutable, and the code object holds the snapshot and every tool the check calls among its own constants: nothing
# of the seal can be rebound, and a function made afresh from that code object (`_SEAL_SAME`, the call expression)
# is the install's.
_SEAL_ID = (
    " and not T.__dict__['__flags__'].__get__(WT := T(w := T.__dict__['__dict__'].__get__(MT)['__dict__']"
    ".__get__(m).get('__crane_seal__'))) & 512 and T.__dict__['__name__'].__get__(WT) == 'ReferenceType' "
    "and ().__class__.__base__.__repr__(w) == @SEAL@ and w() is m and T(cb := w.__callback__) is BF "
    "and T(h := BF.__dict__['__self__'].__get__(cb)) is ().__class__ and ().__class__.__base__.__repr__(h) == @HOLD@ "
    "and ().__class__.__len__(h) == 1 and T(c := h[0]) is T((lambda: 0).__code__) "
    "and ().__class__.__base__.__repr__(c) == @CODE@"
)
_SEAL_SAME = " and (lambda: 0).__class__(c, {'__builtins__': {}})(0, m, None, None, None, None) is True"
# The install: `exec` and `compile` of the builtins, proven the interpreter's own (C functions bound to the module
# whose namespace those builtins are, under their own names), run the bootstrap below on an empty builtins dict with
# only what was proven; the value is ('sealed', the install's seal's three addresses) once installed, else why
# not (a str).
_INSTALL_EXPR = (
    "(lambda P: (lambda T, BF, D, S, SD, M, MT: (lambda e, c, own: "
    "e(c(@BOOT@, '<crane-kernel/bootstrap>', 'exec', 0, True), g := {'__builtins__': {}, 'T': T, 'BF': BF, 'D': D, "
    "'S': S, 'SD': SD, 'MODULES': M, 'MT': MT, 'E': e, 'C': c, 'R': None, 'SRC': @SRC@, 'VER': @VER@, "
    "'NAME': @NAME@, 'DOC': @DOC@, 'A': None, 'DG': {}.__class__.get, 'MDD': T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__, 'SELF': BF.__dict__['__self__'].__get__, 'FNAME': BF.__dict__['__name__'].__get__}) or g['R'] or ('sealed', g['A']) if own(e, 'exec') and own(c, 'compile') else "
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
# First, by statements that call no Python function and allocate nothing the collector counts (the install expression
# gave the readers): the collector off (a finalizer of the notebook's must not run on CRANE's allocations: the
# interpreter's `gc` where it is loaded) and the user's profile/trace hooks off (proven `sys`'s own first).
_gcm = DG(MODULES, "gc")
_gc_is = _gc_off = _gc_on = None
if T(_gcm) is MT:
    _gc_is = DG(MDD(_gcm), "isenabled")
    _gc_off = DG(MDD(_gcm), "disable")
    _gc_on = DG(MDD(_gcm), "enable")
_gc_was = False
if T(_gc_is) is BF and SELF(_gc_is) is _gcm and FNAME(_gc_is) == "isenabled" and T(_gc_off) is BF \\
        and SELF(_gc_off) is _gcm and FNAME(_gc_off) == "disable" and T(_gc_on) is BF and SELF(_gc_on) is _gcm \\
        and FNAME(_gc_on) == "enable":
    _gc_was = _gc_is()
    _gc_off()
else:
    # not loaded: a fresh instance of the built-in module, made by `_imp.create_builtin` (no import machinery; its
    # few allocations precede the switch)
    _gc_is = _gc_off = _gc_on = None
    _ip = DG(MODULES, "_imp")
    _cb = DG(MDD(_ip), "create_builtin") if T(_ip) is MT else None
    if T(_cb) is BF and SELF(_cb) is _ip and FNAME(_cb) == "create_builtin":
        _spec = MT("gc")
        MDD(_spec)["name"] = "gc"
        _gcm = _cb(_spec)
        if T(_gcm) is MT:
            _gc_is = DG(MDD(_gcm), "isenabled")
            _gc_off = DG(MDD(_gcm), "disable")
            _gc_on = DG(MDD(_gcm), "enable")
    if T(_gc_is) is BF and SELF(_gc_is) is _gcm and FNAME(_gc_is) == "isenabled" and T(_gc_off) is BF \\
            and SELF(_gc_off) is _gcm and FNAME(_gc_off) == "disable" and T(_gc_on) is BF \\
            and SELF(_gc_on) is _gcm and FNAME(_gc_on) == "enable":
        _gc_was = _gc_is()
        _gc_off()
    else:
        R = "the notebook replaced `gc` or `_imp.create_builtin` (not the interpreter's own) before CRANE's " \\
            "first export or probe: CRANE's private module is not installed in this kernel (it would call that code)"
_gp, _gt, _sp, _st = DG(SD, "getprofile"), DG(SD, "gettrace"), DG(SD, "setprofile"), DG(SD, "settrace")
if not (T(_gp) is BF and SELF(_gp) is S and FNAME(_gp) == "getprofile" and T(_gt) is BF and SELF(_gt) is S
        and FNAME(_gt) == "gettrace" and T(_sp) is BF and SELF(_sp) is S and FNAME(_sp) == "setprofile"
        and T(_st) is BF and SELF(_st) is S and FNAME(_st) == "settrace"):
    R = "the notebook replaced `sys.getprofile`, `gettrace`, `setprofile` or `settrace` (not the interpreter's " \\
        "own) before CRANE's first export or probe: CRANE's private module is not installed in this kernel (it " \\
        "would call that code)"
    _gp = None
if _gp is not None:
    _prof = _gp()
    _trace = _gt()
    _sp(None)
    _st(None)
try:
    _own = lambda f, mod, n: T(f) is BF and SELF(f) is mod and FNAME(f) == n
    # the seal's parts: the weak reference type, and `atexit.register`, which roots each seal for the process's life
    _wr, _ax = DG(MODULES, "_weakref"), DG(MODULES, "atexit")
    W = MDD(_wr).get("ref") if T(_wr) is MT else None
    _reg = MDD(_ax).get("register") if T(_ax) is MT else None
    if R is None and not (T(W) is T and not T.__dict__["__flags__"].__get__(W) & 512
                          and T.__dict__["__name__"].__get__(W) == "ReferenceType" and _own(_reg, _ax, "register")):
        R = "the notebook replaced `_weakref.ref` or `atexit.register` (or their modules: not the interpreter's " \\
            "own) before CRANE's first export or probe: CRANE's private module is not installed in this kernel (it " \\
            "would call that code)"
    FT = T(lambda: 0)
    _TUP = T(())
    # the seal's one function, compiled here with no builtins: it reads no global and no closure cell (every tool it
    # calls is a constant of its own code object: `@K@`, and the snapshot `@S@`, put in by `op == 2` below), so a
    # function made afresh from its code object (`FT(code, {'__builtins__': {}})`, as the call expression does) is
    # the install's, whatever the notebook rebinds; op 0: does the module bind what the snapshot holds (True/False);
    # op 1: the call (below); op 2: a new seal for the module, binding what it binds now (its three addresses)
    _SEAL_SRC = '''
def _seal(op, m, name, args, quiet, missing):
    K = "@K@"
    S = "@S@"
    T, FT, TUP, STR, MDD, D_ITEMS, MP_ITEMS, CODE, DEFS, KWDS, TFLAGS, TDICT, NAME, GP, GT, SP, ST, GIS, GOFF, GON, \\
        W, REG, OREPR, BASE, PK, PS, BM = K
    prof = GP()
    trace = GT()
    SP(None)
    ST(None)
    on = GIS()
    GOFF()
    try:
        # what the module binds, in order: each key and value of its namespace (`__crane_seal__`, which the call
        # checks by its address, and `__warningregistry__`, which `warnings` writes, excepted), each function's code,
        # defaults and keyword defaults; then the same for every name of the module's own classes (a class whose
        # `__module__` is this module's name, metaclass `type`), read only once the namespace matched
        top = []
        kinds = []
        for k, v in D_ITEMS(MDD(m)):
            if T(k) is STR and (k == "__warningregistry__" or k == "__crane_seal__"):
                continue
            top.append(k)
            top.append(v)
            if T(v) is FT:
                top.append(CODE(v))
                top.append(DEFS(v))
                top.append(KWDS(v))
            elif T(v) is T and TFLAGS(v) & 512:
                kinds.append(v)
        if op != 2:
            then = S.__self__[0]
            if top.__len__() != then.__len__():
                return False if op == 0 else (0, missing)
            i = 0
            for x in top:
                if x is not then[i]:
                    return False if op == 0 else (0, missing)
                i += 1
        inner = []
        for v in kinds:
            cd = TDICT(v)
            mod = cd.get("__module__")
            if T(mod) is STR and mod == NAME:
                for k2, v2 in MP_ITEMS(cd):
                    inner.append(k2)
                    inner.append(v2)
                    if T(v2) is FT:
                        inner.append(CODE(v2))
                        inner.append(DEFS(v2))
                        inner.append(KWDS(v2))
        if op == 2:
            # (held by a bound method: creating a code object interns the strings of its constants' tuples in place,
            # which would swap a key for the interned string of the same text; a method object is not looked into)
            snap = BM(TUP, (TUP(top), TUP(inner)))
            consts = []
            for c in BASE.co_consts:
                if T(c) is STR and c == PK:
                    consts.append(K)
                elif T(c) is STR and c == PS:
                    consts.append(snap)
                else:
                    consts.append(c)
            code = BASE.replace(co_consts=TUP(consts))
            # (its first run here, the collector off: a code object's first run allocates in its first lines)
            FT(code, {"__builtins__": {}})(0, m, None, None, None, None)
            hold = (code,)
            w = W(m, hold.count)
            REG(T, w)
            MDD(m)["__crane_seal__"] = w
            return (OREPR(w), OREPR(hold), OREPR(code))
        then = S.__self__[1]
        if inner.__len__() != then.__len__():
            return False if op == 0 else (0, missing)
        i = 0
        for x in inner:
            if x is not then[i]:
                return False if op == 0 else (0, missing)
            i += 1
        if op == 0:
            return True
        f = MDD(m).get(name)
        if not quiet:
            return (1, f)
        return (0, f(*args))
    finally:
        if on:
            GON()
        ST(trace)
        SP(prof)
'''

    if R is None:
        _sg = {"__builtins__": {}}
        E(C(_SEAL_SRC, "<crane-kernel/seal>", "exec"), _sg)
        _base = FT.__dict__["__code__"].__get__(_sg["_seal"])
        _K = (T, FT, _TUP, "".__class__, MDD, {}.__class__.items, T.__dict__["__dict__"].__get__(T(T.__dict__))["items"],
              FT.__dict__["__code__"].__get__, FT.__dict__["__defaults__"].__get__,
              FT.__dict__["__kwdefaults__"].__get__, T.__dict__["__flags__"].__get__, T.__dict__["__dict__"].__get__,
              NAME, _gp, _gt, _sp, _st, _gc_is, _gc_off, _gc_on, W, _reg, ().__class__.__base__.__repr__, _base, "@K@",
              "@S@", T(FT.__dict__["__get__"](lambda: 0, 0)))
        _cs = []
        for _x in _base.co_consts:
            _cs.append(_K if T(_x) is "".__class__ and _x == "@K@" else _x)
        _m = MT(NAME, DOC)
        _md = MDD(_m)
        _md["__file__"] = "<crane-kernel>"
        _md["__builtins__"] = D
        for _f, _c in SRC:
            E(C(_c, _f, "exec"), _md)
        _md["VERSION"] = VER
        # the seal: a weak reference to the module, rooted for the process's life (an `atexit` entry), whose callback
        # (a tuple's `count`: harmless when the module dies) holds the seal's code object, whose constants hold the
        # snapshot; its address, the tuple's and the code object's are the install's answer (op 2 of a first code
        # object holding no snapshot makes it)
        A = FT(_base.replace(co_consts=_TUP(_cs)), {"__builtins__": {}})(2, _m, None, None, None, None)
        {}.__class__.__setitem__(MODULES, NAME, _m)
        # (nothing here may keep the module, or the sources, alive)
        del _m, _md, SRC, _sg
        _f = _c = _x = _cs = None
finally:
    if _gp is not None:
        _st(_trace)
        _sp(_prof)
        _prof = _trace = None
    if _gc_was:
        _gc_on()
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

    def __init__(self, name: str, doc: str, files: Sequence[Path], quiet: bool = True, threads: bool = False):
        self.name = name
        self.doc = doc
        self.files = tuple(files)
        # the collector stays off while a call of it runs (none of the notebook's finalizers runs on its allocations);
        # False for a module whose call runs the notebook's code as the notebook would (the fork sandbox's start)
        self.quiet = quiet
        # a call of it starts a thread of CRANE's in the kernel (the export's pickler): a notebook's `sys.monitoring`
        # callbacks are off, process-wide, while its requests run (kernel/hooks_off.py; else left as they are)
        self.threads = threads

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
        """The install request: ('sealed', the seal's three addresses: `Seal`) once installed, else why not (a str);
        no name of the notebook's is read."""
        return self._filled(_INSTALL_EXPR, SYS=SYS_EXPR, BOOT=repr(_BOOTSTRAP), SRC=repr(self.sources),
                            VER=repr(self.version), NAME=repr(self.name), DOC=repr(self.doc))

    def _held(self, seal: Seal | None = None, checked: bool = True, then: str = "m", otherwise: str = "None") -> str:
        """`(lambda T, ...: <then> or <otherwise>)(*P)`: `then` (an expression of the module `m`, and of the seal's
        code object `c` given `seal`) when the installed module has our version and, given `seal`, is the very module
        the install that answered `seal` made (its seal, holder and code object at those addresses) binding what that
        install left (the seal's own check, unless `checked` is false: the call runs it itself); else `otherwise`."""
        check = "" if seal is None else (self._filled(_SEAL_ID, SEAL=repr(seal.seal), HOLD=repr(seal.holder),
                                                      CODE=repr(seal.code)) + (_SEAL_SAME if checked else ""))
        return self._filled(_HELD_EXPR, VER=repr(self.version), NAME=repr(self.name), ADDR=check, THEN=then,
                            ELSE=otherwise)

    def held_expression(self, seal: Seal | None = None) -> str:
        """The installed module of our version (given `seal`: the one that install made, binding what it left), else
        None."""
        return f"(lambda P: {self._held(seal)} if P else None)({SYS_EXPR})"

    def version_expression(self, seal: Seal | None = None) -> str:
        """Our VERSION when our module of that version is installed (given `seal`: the module that install made,
        binding what it left), else None."""
        return f"(lambda m: {self.version!r} if m is not None else None)({self.held_expression(seal)})"

    def call_expression(self, function: str, *args: Any, seal: Seal) -> str:
        """`<module>.<function>(*args)` when the installed module is the one the install that answered `seal` made
        and binds what that install left (checked, and the function called, by a function made afresh from the
        seal's own code object: with the collector off where the module is `quiet`), else the MISSING sentinel.
        Arguments must be Python literals (their `repr` is sent); no name of the notebook's is read."""
        arglist = "".join(f"{a!r}, " for a in args)
        call = (f"(lambda r: r[1]({arglist}) if r[0] else r[1])((lambda: 0).__class__(c, {{'__builtins__': {{}}}})"
                f"(1, m, {function!r}, ({arglist}), {self.quiet!r}, {MISSING!r}))")
        held = self._held(seal, checked=False, then=call, otherwise=repr(MISSING))
        return f"(lambda P: {held} if P else {MISSING!r})({SYS_EXPR})"

    def reseal_expression(self, seal: Seal) -> str:
        """A new seal for the module the install that answered `seal` made, binding what it binds NOW (its three
        addresses), else None: for a change of CRANE's own to that module, made in the same request just before
        (a test's simulated condition). Kernel-side code re-seals the same way (kernel/pickling._cloudpickle)."""
        reseal = "(lambda: 0).__class__(c, {'__builtins__': {}})(2, m, None, None, None, None)"
        held = self._held(seal, checked=False, then=reseal)
        return f"(lambda P: {held} if P else None)({SYS_EXPR})"


class Seal(NamedTuple):
    """What an install answered (`object.__repr__` of each: their addresses): the seal (a weak reference to the
    module, rooted for the process's life), the tuple its callback is bound to, and the seal's code object (it holds
    the snapshot). A call takes the module only while all three are there, as the install made them."""

    seal: str
    holder: str
    code: str

    @classmethod
    def of(cls, value: Any) -> Seal | None:
        """The seal a kernel's answer names (a tuple of three `object.__repr__` strings), else None."""
        if type(value) in (tuple, list) and len(value) == 3 and all(type(x) is str for x in value):
            return cls(*value)
        return None


# kernel -> {module name: the addresses (`object.__repr__`) of the seal of the module this process's last install of
# it made, or CRANE's own re-seal of it named: `Seal`}: a module found at that name is called only when it is that very object, binding what that install left (never
# a module the notebook made and filled with our VERSION, nor one at a freed module's address, nor one whose functions
# it rebound). Kept per kernel, so the connections one process holds to it (the language server's attachment, its
# background runs, an agent's fix run) share one install instead of installing over each other at every alternation;
# by connection where the kernel is known by no file or server id (a kernel CRANE started)
_INSTALLED: weakref.WeakKeyDictionary[KernelConnection, dict[str, Seal]] = weakref.WeakKeyDictionary()
_INSTALLED_IN: dict[tuple[str | None, str | None, str | None], dict[str, Seal]] = {}


def _installed(conn: KernelConnection) -> dict[str, Seal]:
    """This process's installs in the kernel `conn` reaches: {module name: its seal's addresses}."""
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
    def address(self) -> Seal | None:
        """The seal of the module this process installed in this kernel last (None: none yet)."""
        return _installed(self.conn).get(self.module.name)

    def adopt(self, value: Any) -> bool:
        """Take `value`, the three addresses of a new seal that CRANE's own code made for this module inside one of
        this process's requests (a re-seal after a change of its own: kernel/pickling._cloudpickle), as the seal to
        call by from now on. False (nothing kept) when it is not such a triple."""
        seal = Seal.of(value)
        if seal is None:
            return False
        _installed(self.conn)[self.module.name] = seal
        return True

    def version_expression(self) -> str:
        """Our VERSION when the module this process installed is there, else None (`KernelModule`'s)."""
        addr = self.address
        return self.module.version_expression(addr) if addr is not None else "None"

    def evaluate(self, expressions: dict[str, str], timeout: float, what: str,
                 start_timeout: float | None = None) -> dict[str, Any]:
        """Evaluate `expressions` in one private request; the raw `user_expressions` entries. `start_timeout`: the
        kernel must start on it within that (KernelConnection.private), then answer within `timeout`. A quiet
        module's expressions each run inside a trace function of the request's own, the notebook's hooks seeing none
        of its frames (kernel/hooks_off.guarded)."""
        if self.module.quiet:  # (the one entry of every request of a quiet module: kernel/hooks_off.py)
            expressions = {k: guarded(v, SYS_EXPR, self.module.threads) for k, v in expressions.items()}
        try:
            reply = self.conn.private(expressions, timeout=timeout, start_timeout=start_timeout)
        except KernelTimeout as exc:
            # a request the kernel never started stays KernelNotStarted (a KernelTimeout): the caller may have to
            # disown it, still queued there (transplant._export)
            late = start_timeout if isinstance(exc, KernelNotStarted) and start_timeout is not None else timeout
            kind = KernelNotStarted if isinstance(exc, KernelNotStarted) else KernelTimeout
            raise kind(f"{what}: no reply within {late:g} s (the kernel is busy running a cell, or stuck)") from exc
        except KernelDead as exc:
            raise KernelDead(f"{what}: the kernel died ({exc})") from exc
        if reply.status != "ok":
            raise self.error(f"{what}: the kernel answered {reply.status}: {reply.ename}: {reply.evalue}")
        return reply.user_expressions

    def ensure_installed(self, timeout: float = 10.0, start_timeout: float | None = None) -> None:
        """Install (or replace) the module in the kernel, privately; check that our version answers. `installs`
        counts an install where no module of our version was there (a fresh kernel), `replaced` one over a module of
        our version this process did not make (another CRANE's, or the notebook's)."""
        what = f"installing {self.module.name}"
        out = self.evaluate(  # (evaluated in this order: `before` reads the table before the install)
            {"before": self.module.version_expression(), "install": self.module.install_expression()}, timeout, what,
            start_timeout=start_timeout)
        sealed = literal_value(out.get("install"), what, self.error)
        if type(sealed) is str:
            raise self.error(f"{what}: {sealed}")
        seal = Seal.of(sealed[1]) if type(sealed) is tuple and len(sealed) == 2 and sealed[0] == "sealed" else None
        if seal is None:
            raise self.error(f"{what}: the kernel answered {sealed!r}, not the addresses of the install's seal")
        _installed(self.conn)[self.module.name] = seal
        if literal_value(out.get("before"), what, self.error) == self.module.version:
            self.replaced += 1
        else:
            self.installs += 1

    def call(self, function: str, *args: Any, timeout: float, what: str, also: Sequence[ModuleClient] = (),
             start_timeout: float | None = None) -> Any:
        """`<module>.<function>(*args)` in the kernel, privately; its literal result. `also`: modules of the same
        kernel the function uses (the export's private cloudpickle), each checked in the same request to be the
        one this process installed (a module put in its place between two requests is never used).
        `start_timeout`: the kernel must start on each of the call's requests within it (the installs where a module
        is gone too), else KernelTimeout: a busy kernel found as quickly as a separate check would find it
        (KernelConnection.private)."""
        clients = (self, *also)
        for attempt in (0, 1):
            for c in clients:
                if c.address is None:  # (never a module this process did not install: installed first)
                    c.ensure_installed(timeout=max(timeout, 10.0), start_timeout=start_timeout)
            seal = self.address
            if seal is None:
                raise self.error(f"{what}: the module {self.module.name} was not installed")
            expr = self.module.call_expression(function, *args, seal=seal)
            for c in also:
                expr = f"(lambda o: {expr} if o is not None else {MISSING!r})({c.module.held_expression(c.address)})"
            out = self.evaluate({"r": expr}, timeout, what, start_timeout=start_timeout)
            value = literal_value(out.get("r"), what, self.error)
            if value != MISSING:
                return value
            if attempt:
                raise self.error(f"{what}: the module {self.module.name} vanished right after it was installed")
            held = self.evaluate({str(i): c.version_expression() for i, c in enumerate(clients)}, timeout, what,
                                 start_timeout=start_timeout)
            for i, c in enumerate(clients):
                if literal_value(held.get(str(i)), what, self.error) != c.module.version:
                    c.ensure_installed(timeout=max(timeout, 10.0), start_timeout=start_timeout)
        raise AssertionError("unreachable")

"""Issue 42: CRANE's kernel-side install (`_crane_transplant`, then its private cloudpickle) runs nothing of the
notebook's, whatever the notebook patched BEFORE CRANE's first export.

Kernels of both environments (IPython 8 and 9) on the transplant path (a stand-in `jax` module). Each case removes
CRANE's private modules from the kernel (the next export installs them again: a first install), makes its patch, and
asks for a copy: the patched code records a marker whenever a frame of CRANE's kernel-side code (`<crane-kernel/...>`,
the install's parts included) is on the stack. No marker, the kernel unchanged (`Untouched`), and the copy either
refused naming the patch or honest (never a certain crash). Before kernel/pristine.py, shield.py, library.py
(`sysconfig.get_paths()`) and bound.py ran before the standard-library check: a builtin, `os.path.join`,
`time.perf_counter`, `re.compile`, ... patched before the install were called by it or bound as they were, and a
standard class swapped for another (`collections.OrderedDict = dict`) was not seen. Before kernel/stdlib_own.py
compared a function's code object with what the installation compiles for its file, code claiming a stdlib file
(`code.replace(co_filename=...)`), a class of the same name and module with such methods, and the real code bound to
the notebook's globals or closure cells passed as the standard library's. Before kernel/private_module.py's requests
read no name, their `exec`, `getattr`, `__import__` (the notebook's own names, or replaced builtins), `compile` and
`types.ModuleType` were called for CRANE (`_wrap_any` records a call made for CRANE whatever frame makes it).
Before the install proved what objects hold (kernel/stdlib_own._so_state, module references, plain data; pristine's
`sys`/`os` values), a stdlib descriptor instance holding the notebook's function (`abc.abstractproperty`,
`types.DynamicClassAttribute`, `functools.cached_property` on `dataclasses._FIELD_BASE`), a `str` subclass in a stdlib
instance's state, a `SimpleNamespace` subclass at `sys.implementation`, `str`/`tuple` subclasses at `sys.prefix`,
`os.sep`, `os.name`, `sys.builtin_module_names`, a `dict` subclass in sysconfig, a plain module of the notebook's at
`posixpath.os` and a plain-module stand-in for posixpath running its genuine code in its own globals all ran the
notebook's code (or refused naming another thing). Before CRANE called only a module its own install made
(kernel/private_module: its address), a module of the notebook's holding CRANE's VERSION at `_crane_transplant` or
`_crane_cloudpickle` was called (`test_a_module_of_the_notebooks_with_crane_version_is_never_used`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.transplant import TRANSPLANT_MODULE, transplant

from ..kernel_envs import KERNEL_ENVS, PYTHON_KERNELS, kernel_python, python_kernel
from .marked_runs import HIT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = r"""
import os, sys, types, builtins, threading, time, collections, weakref, io, functools, re, copyreg
import posixpath
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: transplant path
import numpy as np, pandas as pd
""" + HIT + r"""def _wrap(f, n):
    def g(*a, **k):
        hit(n)
        return f(*a, **k)
    return g
_CRANE = ('_crane_transplant', '_crane_cloudpickle')
def _for_crane(args):  # a call made for CRANE's install or call request (its own frames, its code, its module)
    for a in args:
        if type(a) is str and a.startswith('<crane-kernel') or type(a) is dict and a.get('NAME') in _CRANE \
                or type(a) is types.ModuleType and a.__dict__.get('__name__') in _CRANE \
                or type(a) is types.CodeType and a.co_filename.startswith('<crane-kernel'):
            return True
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename.startswith('<crane-kernel') or f.f_globals.get('NAME') in _CRANE \
                or any(c in _CRANE for c in f.f_code.co_consts if type(c) is str):
            return True
        f = f.f_back
    return False
def _wrap_any(f, n):  # records a call made for CRANE, whatever frame made it
    def g(*a, **k):
        if _for_crane(a):
            HITS.append(n)
        return f(*a, **k)
    return g
def _fresh():  # CRANE's private modules gone: the next export installs them first
    for _n in ('_crane_transplant', '_crane_cloudpickle'):
        sys.modules.pop(_n, None)
small = [1, 2, 3]
df = pd.DataFrame({'a': [1.0, 2.0, 3.0]})
"""


def _swap(target: str, by: str | None = None) -> tuple[str, str]:
    """A patch replacing `target` (a dotted name) by a counting wrapper of itself (or by `by`), and its undo."""
    owner, _, name = target.rpartition(".")
    key = target.replace(".", "_")
    new = by if by is not None else f"_wrap(_real_{key}, {target!r})"
    return (f"_real_{key} = {owner}.{name}\n{owner}.{name} = {new}", f"{owner}.{name} = _real_{key}")


# (id, patch, undo, the cell, what a refusal names (None: the copy must run, honest))
CASES = [
    ("builtins-import", *_swap("builtins.__import__"), "print(sum(small))", "builtins.__import__"),
    ("builtins-len", *_swap("builtins.len"), "print(sum(small))", "builtins.len"),
    ("builtins-isinstance", *_swap("builtins.isinstance"), "print(df.shape)", "builtins.isinstance"),
    ("builtins-getattr", *_swap("builtins.getattr"), "print(df.shape)", "builtins.getattr"),
    ("builtins-build-class", *_swap("builtins.__build_class__"), "print(sum(small))", "builtins.__build_class__"),
    ("builtins-ascii-another-c-function", *_swap("builtins.ascii", "builtins.repr"), "print(sum(small))",
     "builtins.ascii"),
    ("builtins-complex-another-class", *_swap("builtins.complex", "builtins.float"), "print(sum(small))",
     "builtins.complex"),
    ("os-path-join", *_swap("os.path.join"), "print(sum(small))", "join"),
    ("os-path-realpath", *_swap("os.path.realpath"), "print(sum(small))", "realpath"),
    ("os-getcwd", *_swap("os.getcwd"), "print(sum(small))", "os.getcwd"),
    ("os-stat", *_swap("os.stat"), "print(sum(small))", "os.stat"),
    ("posix-lstat", "import posix\n" + _swap("posix.lstat")[0], _swap("posix.lstat")[1], "print(sum(small))",
     "lstat"),
    ("time-perf-counter", *_swap("time.perf_counter"), "print(sum(small))", "time.perf_counter"),
    ("time-perf-counter-another-c-function", *_swap("time.perf_counter", "time.monotonic"), "print(sum(small))",
     "time.perf_counter"),
    ("sys-getfilesystemencoding", *_swap("sys.getfilesystemencoding"), "print(sum(small))",
     "sys.getfilesystemencoding"),
    ("sys-getprofile", *_swap("sys.getprofile"), "print(sum(small))", "sys.getprofile"),
    ("io-open", *_swap("io.open"), "print(sum(small))", "io.open"),
    ("functools-reduce", *_swap("functools.reduce"), "print(sum(small))", "functools.reduce"),
    ("re-compile", *_swap("re.compile"), "print(sum(small))", "re.compile"),
    ("copyreg-slotnames", *_swap("copyreg._slotnames"), "print(sum(small))", "copyreg._slotnames"),
    ("sysconfig-get-paths", "import sysconfig\n" + _swap("sysconfig.get_paths")[0], _swap("sysconfig.get_paths")[1],
     "print(sum(small))", "sysconfig.get_paths"),
    ("threading-thread", "_real_Thread = threading.Thread\nclass _T(_real_Thread):\n    def start(self):\n"
     "        hit('Thread.start')\n        return super().start()\nthreading.Thread = _T",
     "threading.Thread = _real_Thread", "print(sum(small))", "threading.Thread"),
    ("ordereddict-is-dict", *_swap("collections.OrderedDict", "dict"), "print(sum(small))",
     "collections.OrderedDict"),
    ("weakref-ref-is-weakmethod", *_swap("weakref.ref", "weakref.WeakMethod"), "print(sum(small))", "weakref.ref"),
    ("types-functiontype-is-int", *_swap("types.FunctionType", "int"), "print(sum(small))", "types.FunctionType"),
    ("sys-modules-os-stand-in", "_real_os_mod = sys.modules['os']\nclass _FakeOs(types.ModuleType):\n"
     "    def __getattribute__(self, n):\n        hit('os stand-in ' + n)\n        return getattr(_real_os_mod, n)\n"
     "sys.modules['os'] = _FakeOs('os')", "sys.modules['os'] = _real_os_mod", "print(sum(small))",
     "sys.modules['os']"),
    ("os-environ-subclass", "_real_environ = os.environ\nclass _Env(dict):\n    def items(self):\n"
     "        hit('environ items')\n        return dict.items(self)\n    def __iter__(self):\n"
     "        hit('environ iter')\n        return dict.__iter__(self)\nos.environ = _Env(os.environ)",
     "os.environ = _real_environ", "print(sum(small))", None),
    ("sys-path-subclass", "_real_path = sys.path\nclass _P(list):\n    def __iter__(self):\n        hit('path')\n"
     "        return list.__iter__(self)\nsys.path = _P(sys.path)", "sys.path = _real_path", "print(sum(small))",
     None),
    # code that claims the standard library's file (`code.replace(co_filename=...)`), or a class of the same name
    # (module and qualname copied): the code is not what the installation compiles from that file
    ("forged-frozen-posixpath-join", "_real_pj = posixpath.join\ndef _j(a, *p):\n    hit('join')\n    return _real_pj(a, *p)\n"
     "posixpath.join = types.FunctionType(_j.__code__.replace(co_filename=_real_pj.__code__.co_filename), "
     "posixpath.__dict__, 'join', None, _j.__closure__)", "posixpath.join = _real_pj", "print(sum(small))",
     "posixpath.join"),
    ("forged-file-thread-start", "_real_ts = threading.Thread.start\ndef start(self):\n    hit('start')\n"
     "    return _real_ts(self)\nthreading.Thread.start = types.FunctionType(start.__code__.replace("
     "co_filename=_real_ts.__code__.co_filename, co_firstlineno=_real_ts.__code__.co_firstlineno), "
     "threading.__dict__, 'start', None, start.__closure__)", "threading.Thread.start = _real_ts",
     "print(sum(small))", "threading.Thread"),
    ("same-name-ordereddict", "_real_od = collections.OrderedDict\nclass OrderedDict(dict):\n"
     "    def __init__(self, *a, **k):\n        hit('OrderedDict')\n        dict.__init__(self, *a, **k)\n"
     "OrderedDict.__init__ = types.FunctionType(OrderedDict.__init__.__code__.replace("
     "co_filename=collections.__file__), collections.__dict__, '__init__')\n"
     "OrderedDict.__module__ = 'collections'\ncollections.OrderedDict = OrderedDict",
     "collections.OrderedDict = _real_od", "print(sum(small))", "collections.OrderedDict"),
    ("same-name-environ-class", "_real_env_t = os._Environ\nclass _Environ(_real_env_t):\n"
     "    def __getitem__(self, k):\n        hit('_Environ')\n        return _real_env_t.__getitem__(self, k)\n"
     "_Environ.__getitem__ = types.FunctionType(_Environ.__getitem__.__code__.replace(co_filename="
     "_real_env_t.__getitem__.__code__.co_filename), os.__dict__, '__getitem__', None, "
     "_Environ.__getitem__.__closure__)\n_Environ.__module__ = 'os'\nos._Environ = _Environ",
     "os._Environ = _real_env_t", "print(sum(small))", "os._Environ"),
    ("same-name-thread-class", "_real_Th = threading.Thread\nclass Thread(_real_Th):\n    def start(self):\n"
     "        hit('Thread.start')\n        return _real_Th.start(self)\n"
     "Thread.start = types.FunctionType(Thread.start.__code__.replace(co_filename=_real_Th.start.__code__.co_filename,"
     " co_firstlineno=_real_Th.start.__code__.co_firstlineno), threading.__dict__, 'start')\n"
     "Thread.__module__ = 'threading'\nthreading.Thread = Thread", "threading.Thread = _real_Th",
     "print(sum(small))", "threading.Thread"),
    ("genuine-code-notebook-globals", "_real_pj2 = posixpath.join\n_g = dict(posixpath.__dict__)\n"
     "_g['os'] = types.SimpleNamespace(fspath=lambda p: (hit('fspath'), p)[1])\n"
     "posixpath.join = types.FunctionType(_real_pj2.__code__, _g, 'join')", "posixpath.join = _real_pj2",
     "print(sum(small))", "posixpath.join"),
    ("genuine-code-notebook-closure", "_real_cmr = collections.ChainMap.__repr__\n"
     "_ev = lambda self: (hit('ChainMap.__repr__'), _real_cmr(self))[1]\n"
     "collections.ChainMap.__repr__ = types.FunctionType(_real_cmr.__code__, _real_cmr.__globals__, '__repr__', None,"
     " tuple(types.CellType(_ev) if n == 'user_function' else c for n, c in zip(_real_cmr.__code__.co_freevars, "
     "_real_cmr.__closure__)))", "collections.ChainMap.__repr__ = _real_cmr", "print(sum(small))",
     "collections.ChainMap"),
    ("partial-member-first-install", "_real_wkg = weakref.WeakKeyDictionary.get\n"
     "weakref.WeakKeyDictionary.get = functools.partial(lambda self, *a: (hit('WeakKeyDictionary.get'), "
     "_real_wkg(self, *a))[1])", "weakref.WeakKeyDictionary.get = _real_wkg", "print(sum(small))",
     "weakref.WeakKeyDictionary"),
    # the install and call requests themselves (kernel/private_module.py): evaluated in the notebook's namespace, so
    # before they read `exec`, `getattr`, `__import__` there and in the builtins, `types.ModuleType`, `compile`
    ("user-name-exec", "exec = _wrap_any(builtins.exec, 'exec')", "del exec", "print(sum(small))", None),
    ("user-name-getattr", "getattr = _wrap_any(builtins.getattr, 'getattr')", "del getattr", "print(sum(small))",
     None),
    ("user-name-import", "__import__ = _wrap_any(builtins.__import__, '__import__')", "del __import__",
     "print(sum(small))", None),
    ("builtins-exec-any-frame", *_swap("builtins.exec", "_wrap_any(_real_builtins_exec, 'exec')"),
     "print(sum(small))", "builtins.exec"),
    ("builtins-compile-any-frame", *_swap("builtins.compile", "_wrap_any(_real_builtins_compile, 'compile')"),
     "print(sum(small))", "builtins.compile"),
    ("builtins-import-any-frame", *_swap("builtins.__import__", "_wrap_any(_real_builtins___import__, 'import')"),
     "print(sum(small))", "builtins.__import__"),
    # an instance of a standard-library Python class set on a class the install reads, holding the notebook's code
    # (the class proven, the instance's state not: kernel/stdlib_own._so_state)
    ("abstractproperty-member", "import dataclasses, abc\ndataclasses._FIELD_BASE.name = abc.abstractproperty("
     "lambda self: (hit('abstractproperty'), '_FIELD')[1])", "del dataclasses._FIELD_BASE.name", "print(sum(small))",
     "dataclasses._FIELD_BASE"),
    ("dynamic-class-attribute-member", "import dataclasses\ndataclasses._FIELD_BASE.name = "
     "types.DynamicClassAttribute(lambda self: (hit('DynamicClassAttribute'), '_FIELD')[1])",
     "del dataclasses._FIELD_BASE.name", "print(sum(small))", "dataclasses._FIELD_BASE"),
    ("cached-property-member", "import dataclasses\n_real_fname = dataclasses._FIELD.__dict__.pop('name')\n"
     "_cp = functools.cached_property(lambda self: (hit('cached_property'), _real_fname)[1])\n"
     "_cp.__set_name__(dataclasses._FIELD_BASE, 'name')\ndataclasses._FIELD_BASE.name = _cp",
     "del dataclasses._FIELD_BASE.name\ndataclasses._FIELD.name = _real_fname", "print(sum(small))",
     "dataclasses._FIELD_BASE"),
    ("str-subclass-in-instance-state", "import dataclasses\nclass _HashStr(str):\n    def __hash__(self):\n"
     "        hit('hash')\n        return str.__hash__(self)\n_real_fname2 = dataclasses._FIELD.name\n"
     "dataclasses._FIELD.name = _HashStr(_real_fname2)", "dataclasses._FIELD.name = _real_fname2", "print(sum(small))",
     "dataclasses._FIELD"),
    ("sys-implementation-namespace-subclass", "_real_impl = sys.implementation\nclass _NS(types.SimpleNamespace):\n"
     "    @property\n    def __dict__(self):\n        hit('implementation')\n        return vars(_real_impl)\n"
     "sys.implementation = _NS(**vars(_real_impl))", "sys.implementation = _real_impl", "print(sum(small))",
     "sys.implementation"),
    # plain data of the notebook's classes where the install computes with it (a hash, a compare, a join)
    ("sys-prefix-str-subclass", "_real_prefix = sys.prefix\nclass _PS(str):\n    def __hash__(self):\n"
     "        hit('prefix')\n        return str.__hash__(self)\nsys.prefix = _PS(sys.prefix)",
     "sys.prefix = _real_prefix", "print(sum(small))", "sys.prefix"),
    ("os-sep-str-subclass", "_real_sep = os.sep\nclass _Sep(str):\n    def __radd__(self, o):\n"
     "        hit('sep')\n        return str.__add__(o, self)\nos.sep = _Sep(os.sep)", "os.sep = _real_sep",
     "print(sum(small))", "os.sep"),
    ("os-name-str-subclass", "_real_osname = os.name\nclass _Name(str):\n    def __eq__(self, o):\n"
     "        hit('os.name')\n        return str.__eq__(self, o)\n    __hash__ = str.__hash__\n"
     "os.name = _Name(os.name)", "os.name = _real_osname", "print(sum(small))", "os.name"),
    ("sys-builtin-module-names-tuple-subclass", "_real_bmn = sys.builtin_module_names\nclass _BT(tuple):\n"
     "    def __iter__(self):\n        hit('builtin_module_names')\n        return tuple.__iter__(self)\n"
     "sys.builtin_module_names = _BT(_real_bmn)", "sys.builtin_module_names = _real_bmn", "print(sum(small))",
     "sys.builtin_module_names"),
    ("sysconfig-dict-subclass", "import sysconfig\n_real_schemes = sysconfig._INSTALL_SCHEMES\nclass _D(dict):\n"
     "    def __getitem__(self, k):\n        hit('schemes')\n        return dict.__getitem__(self, k)\n"
     "sysconfig._INSTALL_SCHEMES = _D(_real_schemes)", "sysconfig._INSTALL_SCHEMES = _real_schemes",
     "print(sum(small))", "sysconfig._INSTALL_SCHEMES"),
    # a plain module of the notebook's where the standard library's code looks names up, and a plain-module stand-in
    # at `sys.modules['posixpath']` running the genuine frozen code in its own globals, put everywhere the real one
    # was (its `os` the notebook's): the module is not the one the table holds under its name
    ("module-member-plain-module", "_fos = types.ModuleType('os')\n_fos.__dict__.update(os.__dict__)\n"
     "_fos.fspath = lambda p: (hit('fspath'), os.fspath(p))[1]\nposixpath.os = _fos", "posixpath.os = os",
     "print(sum(small))", "posixpath.os"),
    ("module-stand-in-own-globals", "import _imp, sysconfig\n_real_pp = sys.modules['posixpath']\n"
     "_fpp = types.ModuleType('posixpath')\nexec(_imp.get_frozen_object('posixpath'), _fpp.__dict__)\n"
     "_fos2 = types.ModuleType('os')\n_fos2.__dict__.update(os.__dict__)\n"
     "_fos2.fspath = lambda p: (hit('fspath'), os.fspath(p))[1]\n_fpp.os = _fos2\n"
     "def _swap_everywhere(real, fake):\n    out = []\n    for m in list(sys.modules.values()):\n"
     "        d = getattr(m, '__dict__', None)\n"
     "        if type(m) is not types.ModuleType or m is fake or type(d) is not dict or d is globals():\n"
     "            continue\n        for k, v in list(d.items()):\n"
     "            if v is real or type(v) is types.FunctionType and v.__globals__ is real.__dict__:\n"
     "                out.append((d, k, v))\n"
     "                d[k] = fake if v is real else fake.__dict__[v.__name__]\n    return out\n"
     "_swapped = _swap_everywhere(_real_pp, _fpp)\n"
     "sys.modules['posixpath'] = sys.modules['os.path'] = _fpp",
     "for _d, _k, _v in _swapped:\n    _d[_k] = _v\nsys.modules['posixpath'] = sys.modules['os.path'] = _real_pp",
     "print(sum(small))", "posixpath.os"),
    ("types-moduletype-subclass", "_real_MT = types.ModuleType\nclass ModuleType(_real_MT):\n"
     "    def __init__(self, *a):\n        if _for_crane(a) or a[:1] in (('_crane_transplant',), "
     "('_crane_cloudpickle',)):\n            HITS.append('ModuleType')\n        _real_MT.__init__(self, *a)\n"
     "types.ModuleType = ModuleType", "types.ModuleType = _real_MT", "print(sum(small))", "types.ModuleType"),
]


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def env(request, tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp(f"t42i-{request.param}"), python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield {"name": request.param, "conn": conn}
    kernel.shutdown()


def _first_install(env, patch: str, undo: str, cell: str, crashes: bool = False):
    conn = env["conn"]
    assert conn.run_cell("_fresh()\n" + patch, timeout=60).status == "ok", patch
    try:
        conn.evaluate("HITS.clear()")
        with Untouched(conn) as watch:
            v = transplant(conn, cell, 60.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell(undo + "\n_fresh()", timeout=60).status == "ok", undo
    assert hits == [], (hits, v)
    assert watch.unchanged, (watch.changes(), watch.outputs, watch.hits)
    assert crashes or not (v.verdict == "crash" and v.certain), v  # (no false certain crash)
    return v


@pytest.mark.parametrize(("case", "patch", "undo", "cell", "named"), CASES, ids=[c[0] for c in CASES])
def test_a_patch_made_before_the_first_install_runs_nothing(env, case, patch, undo, cell, named):
    v = _first_install(env, patch, undo, cell)
    if named is None:
        assert v.verdict == "no-crash" and v.certain, v
    else:
        assert v.verdict == "unavailable", v
        assert named in (v.reason or ""), v
        # (refused by the install, or before it by every request's first step, kernel/hooks_off.guarded: it names
        # the patched `sys` chain, `exec` or `compile` as well)
        assert "before CRANE's first export" in (v.reason or "") or "private request is not run" in (v.reason or "") \
            or named.startswith("sys.modules"), v


def test_the_honest_kernel_installs_and_copies(env):
    """No patch: the first install passes its checks and the copy gives the kernel's own verdict."""
    v = _first_install(env, "pass", "pass", "print(sum(small))")
    assert v.verdict == "no-crash" and v.certain, v
    v = _first_install(env, "pass", "pass", "print(df['a'].iloc[5])", crashes=True)
    assert v.verdict == "crash" and v.certain and v.ename == "IndexError", v


@pytest.mark.parametrize("version", PYTHON_KERNELS)
def test_the_alias_table_holds_every_interpreters_own_aliases(version):
    """kernel/stdlib_own's `_SO_ALIASES` (a name of the checked modules holding a class of another name in an
    interpreter as installed) is complete for each supported interpreter here: else an honest kernel of it would be
    refused at install."""
    from crane.sandbox.kernel.stdlib_own import _SO_ALIASES, _SO_INSTALL_MODULES

    python = python_kernel(version)
    program = (
        "import importlib, json, sys\nout = []\n"
        f"for m in {_SO_INSTALL_MODULES!r}:\n"
        "    try:\n        md = vars(importlib.import_module(m))\n    except ImportError:\n        continue\n"
        "    for n, v in md.items():\n"
        "        if isinstance(v, type) and m != 'builtins' and not n.startswith('__'):\n"
        "            q = type.__dict__['__qualname__'].__get__(v)\n"
        "            if q != n:\n                out.append([m, n, q])\n"
        "print(json.dumps(out))\n")
    found = json.loads(subprocess.run([python, "-I", "-c", program], capture_output=True, text=True, check=True,
                                      timeout=120).stdout)
    missing = [(m, n, q) for m, n, q in found
               if not any(e.partition("=")[0] == n and q in e.partition("=")[2].split("|")
                          for e in _SO_ALIASES.get(m, "").split())]
    assert missing == [], missing


# A module of the notebook's at CRANE's private module's name, holding CRANE's VERSION (the genuine module's namespace
# copied, one function its own): `_crane_transplant`'s export, or `_crane_cloudpickle` with a pickler whose method
# claims CRANE's file name. The daemon calls (and the export uses) only a module its own install made
# (kernel/private_module: its address as that install reported it), so it installs over the notebook's.
IMPERSONATE = {
    "_crane_transplant": "_fake.export = lambda *a, **k: (HITS.append('export'), _real.export(*a, **k))[1]",
    "_crane_cloudpickle": (
        "class CloudPickler(_real.CloudPickler):\n    def dump(self, obj):\n        HITS.append('dump')\n"
        "        return _real.CloudPickler.dump(self, obj)\n"
        "CloudPickler.dump = types.FunctionType(CloudPickler.dump.__code__.replace(co_filename="
        "'<crane-kernel/cloudpickle.py>'), globals(), 'dump', None, CloudPickler.dump.__closure__)\n"
        "_fake.CloudPickler = CloudPickler"),
}


@pytest.mark.parametrize("daemon", ["same-daemon", "new-daemon"])
@pytest.mark.parametrize("name", sorted(IMPERSONATE))
def test_a_module_of_the_notebooks_with_crane_version_is_never_used(env, name, daemon):
    from crane.kernel import private_module

    conn = env["conn"]
    v = transplant(conn, "print(sum(small))", 60.0)  # (CRANE's own modules installed: the notebook copies them)
    assert v.verdict == "no-crash", v
    patch = (f"_real = sys.modules[{name!r}]\n_fake = types.ModuleType({name!r})\n"
             f"_fake.__dict__.update(_real.__dict__)\n{IMPERSONATE[name]}\nsys.modules[{name!r}] = _fake")
    assert conn.run_cell(patch, timeout=60).status == "ok"
    if daemon == "new-daemon":  # (a daemon that has installed nothing in this kernel yet)
        private_module._installed(conn).clear()
    try:
        conn.evaluate("HITS.clear()")
        with Untouched(conn) as watch:
            v = transplant(conn, "print(sum(small))", 60.0)
        hits = conn.evaluate("list(HITS)")
        replaced = conn.evaluate(f"sys.modules[{name!r}] is not _fake")
    finally:
        assert conn.run_cell("_fresh()", timeout=60).status == "ok"
    assert hits == [], (hits, v)
    assert replaced
    assert watch.unchanged, (watch.changes(), [m.get("content") for m in watch.outputs])
    assert v.verdict == "no-crash" and v.certain, v


# CRANE's own modules, installed, then a function (or a class's method) in them rebound by the notebook: the daemon
# calls (and the export uses) a module only while it binds what its install (or CRANE's own re-seal of its private
# cloudpickle, at its first export) left (kernel/private_module's seal), so it installs afresh. Before, the rebound
# `export`, the export's `_cell_objects`, cloudpickle's pickler method and module function were called.
REBIND = {
    "transplant-entry": "_m = sys.modules['_crane_transplant']\n_e = _m.export\n"
                        "_m.export = lambda *a, **k: (HITS.append('export'), _e(*a, **k))[1]",
    "transplant-inner": "_m = sys.modules['_crane_transplant']\n_m._cell_objects = _wrap(_m._cell_objects, 'cell')",
    "cloudpickle-method": "_m = sys.modules['_crane_cloudpickle']\n"
                          "_m.CloudPickler.reducer_override = _wrap(_m.CloudPickler.reducer_override, 'override')",
    "cloudpickle-function": "_m = sys.modules['_crane_cloudpickle']\n"
                            "_m._should_pickle_by_reference = _wrap(_m._should_pickle_by_reference, 'by_ref')",
}


@pytest.mark.parametrize("case", sorted(REBIND))
def test_a_function_rebound_in_cranes_modules_is_never_called(env, case):
    conn = env["conn"]
    cell = "print(hit.__name__, sum(small))"  # (a notebook function: pickled by value through cloudpickle)
    v = transplant(conn, cell, 60.0)
    assert v.verdict == "no-crash", v
    v = transplant(conn, cell, 60.0)  # (after CRANE's re-seal of its cloudpickle at the first export)
    assert v.verdict == "no-crash", v
    assert conn.run_cell(REBIND[case], timeout=60).status == "ok"
    try:
        conn.evaluate("HITS.clear()")
        with Untouched(conn) as watch:
            v = transplant(conn, cell, 60.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell("_fresh()", timeout=60).status == "ok"
    assert hits == [], (hits, v)
    assert watch.unchanged, (watch.changes(), [m.get("content") for m in watch.outputs])
    assert v.verdict == "no-crash" and v.certain, v


# A key of the notebook's in a table the export looks names up in (kernel/lookups.py): its `__eq__` ran inside
# CRANE's frames whenever a name CRANE asked for (here: libraries the kernel has not loaded, the DataFrame's class)
# shared its hash. Before, each recorded a hit (the sys.modules and dispatch-table cases reproduced with the
# export's own lookups: `dict.get(_MODULES, 'torch')`, `dict.get(copyreg.dispatch_table, DataFrame)`).
# (the names CRANE's export asks namespaces for, from its own sources; the namespaces it reads while copying)
_ASKED = sorted(set(re.findall(r'get\("([A-Za-z_][A-Za-z_0-9]*)"', "".join(t for _, t in TRANSPLANT_MODULE.sources))))
_SPACES = ("numpy", "pandas", "builtins", "sys", "os", "copyreg", "threading", "pandas.core.frame",
           "IPython.core.interactiveshell")
_COLLIDE = ("class _Collide:\n    def __init__(self, h):\n        self.h = h\n    def __hash__(self):\n"
            "        return self.h\n    def __eq__(self, o):\n        hit('key __eq__')\n        return False\n")
TABLE_KEYS = [
    ("table-key-sys-modules", _COLLIDE + "_keys = [_Collide(hash(n)) for n in ('torch', 'tensorflow', 'jax', 'keras', "
     "'polars', 'scipy', 'sklearn', 'cupy', 'lightgbm', 'xgboost', 'pyarrow', 'matplotlib')]\n"
     "for _k in _keys:\n    sys.modules[_k] = sys", "for _k in _keys:\n    del sys.modules[_k]", "`sys.modules`"),
    ("table-key-module-namespace", _COLLIDE + f"_nk = []\nfor _mn in {_SPACES!r}:\n    _d = vars(sys.modules[_mn])\n"
     f"    for _n in {_ASKED!r}:\n        if _n not in _d:\n            _nk.append((_d, _Collide(hash(_n))))\n"
     "            _d[_nk[-1][1]] = 1", "for _d, _k in _nk:\n    del _d[_k]", "the namespace of the module"),
    ("table-key-dispatch-table", _COLLIDE + "_dk = _Collide(hash(pd.DataFrame))\ncopyreg.dispatch_table[_dk] = len",
     "del copyreg.dispatch_table[_dk]", "`copyreg.dispatch_table`"),
    ("table-key-extension-registry", _COLLIDE + "_ek = (_Collide(hash('pandas.core.frame')), 'DataFrame')\n"
     "copyreg._extension_registry[_ek] = 4242", "del copyreg._extension_registry[_ek]",
     "`copyreg._extension_registry`"),
]


@pytest.mark.parametrize(("case", "patch", "undo", "named"), TABLE_KEYS, ids=[c[0] for c in TABLE_KEYS])
def test_a_key_of_the_notebooks_in_a_table_the_export_reads_runs_nothing(env, case, patch, undo, named):
    conn = env["conn"]
    v = transplant(conn, "print(sum(small))", 60.0)  # (installed: the check is the export's, at every copy)
    assert v.verdict == "no-crash", v
    assert conn.run_cell(patch, timeout=60).status == "ok", patch
    try:
        conn.evaluate("HITS.clear()")
        with Untouched(conn) as watch:
            v = transplant(conn, "print(sum(small), df.shape)", 60.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell(undo, timeout=60).status == "ok", undo
    assert hits == [], (hits, v)
    assert watch.unchanged, (watch.changes(), watch.outputs, watch.hits)
    assert v.verdict == "unavailable" and named in (v.reason or ""), v
    v = transplant(conn, "print(sum(small), df.shape)", 60.0)  # (undone: the honest copy again)
    assert v.verdict == "no-crash" and v.certain, (v.reason, v)

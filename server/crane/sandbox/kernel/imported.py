"""Kernel side (the private module `_crane_prewarm`): which libraries the notebook imported, and what a transplant
worker of this kernel starts with, read without an export and without running anything of the notebook's.

`imported()` answers the daemon's prewarm (crane.sandbox.prewarm) before any copied run exists: the interpreter,
the cwd, the environment, the top-level library packages in `sys.modules` (the interpreter's table, bound at
install after an exact-type check; its keys read with `dict` methods; a module's `__file__` read from its
namespace dict, never by attribute lookup, so no module `__getattr__` or stand-in object is ever called) and this
process's identity (pid, start time, pid namespace: the pool's key for the kernel's workers). Only packages whose
file lies under the interpreter's installation count (`library.is_library`): the worker imports nothing else
before it is confined. The user's profile/trace hooks are off meanwhile (inline, as kernel/shield.py says);
shield.py comes first in the bundle, so the builtins this part calls are the copy taken at install.
"""

from __future__ import annotations

import os
import sys
import threading
import types

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.shield import environ_strings, process_identity  # kernel: strip

# -- bound at install (nothing is looked up on a shared module when it runs: the notebook may rebind any of it)
_O_GET = object.__getattribute__
_MODULES: dict = sys.modules if type(sys.modules) is dict else {}
_SYS: dict = _O_GET(sys, "__dict__")
_THREADING: dict = _O_GET(threading, "__dict__")
_STDLIB = frozenset(_SYS.get("stdlib_module_names", ()))
_EXECUTABLE = _SYS.get("executable") if type(_SYS.get("executable")) is str else ""
_MODULE_TYPE = types.ModuleType
_getprofile, _setprofile, _gettrace, _settrace = sys.getprofile, sys.setprofile, sys.gettrace, sys.settrace
_getcwd = os.getcwd
# the kernel's own packages (ipykernel and what it runs on): never a notebook's library
_KERNEL = frozenset(("ipykernel", "IPython", "jupyter_client", "jupyter_core", "zmq", "tornado", "traitlets", "comm",
                     "debugpy", "prompt_toolkit", "pygments", "jedi", "parso", "matplotlib_inline", "psutil",
                     "nest_asyncio", "pexpect", "ptyprocess", "wcwidth", "stack_data", "executing", "asttokens",
                     "pure_eval", "decorator", "platformdirs", "dateutil", "pickleshare", "backcall", "six",
                     "_pytest", "setuptools", "pkg_resources", "_distutils_hack"))
_MOST = 400  # packages reported at most


def _library_packages() -> list:
    out: list = []
    seen: set = set()
    for name in list(dict.keys(_MODULES)):
        if type(name) is not str:
            continue
        top = str.partition(name, ".")[0]
        if top in seen or top in _STDLIB or top in _KERNEL or str.startswith(top, ("_", "pydev")):
            continue
        seen.add(top)
        m = dict.get(_MODULES, top)
        ns = _O_GET(m, "__dict__") if type(m) is _MODULE_TYPE else None
        path = dict.get(ns, "__file__") if type(ns) is dict else None
        if type(path) is str and path and is_library(path):
            out.append(top)
            if len(out) >= _MOST:
                break
    return out


def _process() -> dict:
    pid, start, pidns = process_identity()
    return {"pid": pid, "start": start, "pidns": pidns}


def imported() -> dict:
    """What a worker of this kernel needs to be started ahead (see the module docstring)."""
    saved = (_getprofile(), _gettrace(), _THREADING.get("_profile_hook"), _THREADING.get("_trace_hook"))
    _setprofile(None)
    _settrace(None)
    _THREADING["_profile_hook"] = _THREADING["_trace_hook"] = None
    try:
        try:
            cwd = _getcwd()
        except OSError:
            cwd = "/"
        return {"executable": _EXECUTABLE, "cwd": cwd, "env": environ_strings(), "modules": _library_packages(),
                **_process()}
    finally:
        _THREADING["_profile_hook"], _THREADING["_trace_hook"] = saved[2], saved[3]
        _settrace(saved[1])
        _setprofile(saved[0])

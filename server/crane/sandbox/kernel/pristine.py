"""Transplant export, kernel side: the interpreter's own builtins and module table, proven before anything runs.

Runs in the user's kernel, the FIRST part of `_crane_transplant` (before kernel/shield.py). A part's top-level code
looks its names up in the builtins the bundle was installed with and each `import` calls `builtins.__import__`: a
notebook that replaced `builtins.len`, `builtins.__import__`, `builtins.isinstance` (or put a stand-in at
`sys.modules['os']`) before CRANE's first export would have the install itself call its code. So this part's
top-level code uses no builtin name and no `import` statement (no `from __future__` either, whose statement
imports): it finds the interpreter's own `sys` and builtins through its frozen import machinery (a function of
`_frozen_importlib`'s `ModuleSpec`, found among `object`'s subclasses by C-level descriptors), makes the bundle's
builtins a private copy of those, then (in functions, which run on that copy) proves every name of the
interpreter's builtins (`_PR_NAMES`): a C function of a built-in module under its own name, or a static type under
its own name (`EnvironmentError`/`IOError` are `OSError`). Anything else refuses the install, naming it, before
any other part runs. The copy's `__import__` (`_pr_import`) returns a module already imported as the interpreter's
table holds it when it is a plain module; a standard-library name held by anything else (a notebook's stand-in)
is refused by name; any other import goes to the interpreter's own `__import__` (proven above). Then the plain
values of `sys` and `os` every part reads at install (`os.sep`, `os.name`, `sys.prefix`, ..., `sys.implementation`
and what it holds) must not be of a class of the notebook's subclassing a plain data type (its `__hash__`, `__eq__`,
`__add__` would run when a part or sysconfig computes with them): else the install is refused, naming the value.
"""

from typing import Any  # kernel: strip

_PR_TYPE: "Any" = ().__class__.__class__
_PR_OBJECT: "Any" = ().__class__.__base__
_PR_DICT: "Any" = {}.__class__
_PR_STR: "Any" = "".__class__
_PR_TUPLE: "Any" = ().__class__
_PR_FUNCTION: "Any" = (lambda: 0).__class__
_PR_BFUNC: "Any" = _PR_TYPE(_PR_OBJECT.__subclasses__)  # builtin_function_or_method
_PR_T_DICT = _PR_TYPE.__dict__["__dict__"]
_PR_T_NAME = _PR_TYPE.__dict__["__name__"]
_PR_T_MODULE = _PR_TYPE.__dict__["__module__"]
_PR_T_FLAGS = _PR_TYPE.__dict__["__flags__"]
_PR_T_MRO = _PR_TYPE.__dict__["__mro__"]
_PR_HEAPTYPE = 1 << 9
_PR_MODULE_T: "Any" = None
_PR_SPEC_T: "Any" = None
_pr_k: "Any"
for _pr_k in _PR_OBJECT.__subclasses__():
    _pr_n, _pr_m = _PR_T_NAME.__get__(_pr_k, _PR_TYPE), _PR_T_MODULE.__get__(_pr_k, _PR_TYPE)
    if _PR_TYPE(_pr_n) is not _PR_STR or _PR_TYPE(_pr_m) is not _PR_STR:
        continue
    if _pr_n == "module" and _pr_m == "builtins" and not _PR_T_FLAGS.__get__(_pr_k, _PR_TYPE) & _PR_HEAPTYPE:
        _PR_MODULE_T = _pr_k
    elif _pr_n == "ModuleSpec" and _pr_m == "_frozen_importlib":
        _PR_SPEC_T = _pr_k
# (the loop's last class is the newest subclass of object: often one a cell defined just before the install. Kept in
# this module's globals it stayed alive for good: `del K; gc.collect()` no longer freed it, nor ran its finalizers;
# issue 42, h6)
_pr_k = _pr_n = _pr_m = None
_PR_M_DICT = _PR_MODULE_T.__dict__["__dict__"]  # a module's namespace, read by its C slot
_PR_F_CODE = _PR_FUNCTION.__dict__["__code__"]
_PR_F_GLOBALS = _PR_FUNCTION.__dict__["__globals__"]
_PR_BF_SELF = _PR_BFUNC.__dict__["__self__"]
_PR_BF_NAME = _PR_BFUNC.__dict__["__name__"]
# `_frozen_importlib`'s namespace: the globals of its ModuleSpec's own `__init__` (its code the frozen file's)
_pr_init = _PR_T_DICT.__get__(_PR_SPEC_T, _PR_TYPE).get("__init__")
_PR_BOOT: "dict" = {}
if _PR_TYPE(_pr_init) is _PR_FUNCTION and _PR_F_CODE.__get__(_pr_init, _PR_FUNCTION).co_filename == \
        "<frozen importlib._bootstrap>":
    _PR_BOOT = _PR_F_GLOBALS.__get__(_pr_init, _PR_FUNCTION)
_PR_SYS = _PR_DICT.get(_PR_BOOT, "sys")
_PR_SYS_DICT: "dict" = _PR_M_DICT.__get__(_PR_SYS, _PR_MODULE_T) if _PR_TYPE(_PR_SYS) is _PR_MODULE_T else {}
_PR_MODULES: "Any" = _PR_DICT.get(_PR_SYS_DICT, "modules")
if _PR_TYPE(_PR_MODULES) is not _PR_DICT:
    _PR_MODULES = {}
_PR_REAL: "Any" = _PR_DICT.get(_PR_BOOT, "__builtins__")
if _PR_TYPE(_PR_REAL) is _PR_MODULE_T:
    _PR_REAL = _PR_M_DICT.__get__(_PR_REAL, _PR_MODULE_T)
if _PR_TYPE(_PR_REAL) is not _PR_DICT:
    _PR_REAL = {}
_PR_BUILTIN_MODULES: "Any" = _PR_DICT.get(_PR_SYS_DICT, "builtin_module_names")
_PR_STDLIB_NAMES: "Any" = _PR_DICT.get(_PR_SYS_DICT, "stdlib_module_names")
# the bundle's builtins from here on: a private copy of the interpreter's own (proven below, before any other part)
_PR_PRIVATE: "dict" = _PR_DICT(_PR_REAL)
_PR_F_GLOBALS.__get__(lambda: 0, _PR_FUNCTION)["__builtins__"] = _PR_PRIVATE

# every name of the builtins a C function or type in 3.11-3.13, but `input` (ipykernel replaces it) and `open` (tools
# wrap it: CRANE's parts call `_io.open`, bound by kernel/shield.py, and tests/kernel/untouched's effect sentinel
# records any call of `builtins.open` from CRANE's frames): CRANE and the standard library code it runs call neither
_PR_NAMES = (
    "ArithmeticError", "AssertionError", "AttributeError", "BaseException", "BaseExceptionGroup", "BlockingIOError",
    "BrokenPipeError", "BufferError", "BytesWarning", "ChildProcessError", "ConnectionAbortedError",
    "ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "DeprecationWarning", "EOFError",
    "EncodingWarning", "EnvironmentError", "Exception", "ExceptionGroup", "FileExistsError", "FileNotFoundError",
    "FloatingPointError", "FutureWarning", "GeneratorExit", "IOError", "ImportError", "ImportWarning",
    "IndentationError", "IndexError", "InterruptedError", "IsADirectoryError", "KeyError", "KeyboardInterrupt",
    "LookupError", "MemoryError", "ModuleNotFoundError", "NameError", "NotADirectoryError", "NotImplementedError",
    "OSError", "OverflowError", "PendingDeprecationWarning", "PermissionError", "ProcessLookupError",
    "PythonFinalizationError", "RecursionError", "ReferenceError", "ResourceWarning", "RuntimeError",
    "RuntimeWarning", "StopAsyncIteration", "StopIteration", "SyntaxError", "SyntaxWarning", "SystemError",
    "SystemExit", "TabError", "TimeoutError", "TypeError", "UnboundLocalError", "UnicodeDecodeError",
    "UnicodeEncodeError", "UnicodeError", "UnicodeTranslateError", "UnicodeWarning", "UserWarning", "ValueError",
    "Warning", "ZeroDivisionError", "_IncompleteInputError", "__build_class__", "__import__", "abs", "aiter", "all",
    "anext", "any", "ascii", "bin", "bool", "breakpoint", "bytearray", "bytes", "callable", "chr", "classmethod",
    "compile", "complex", "delattr", "dict", "dir", "divmod", "enumerate", "eval", "exec", "filter", "float",
    "format", "frozenset", "getattr", "globals", "hasattr", "hash", "hex", "id", "int", "isinstance", "issubclass",
    "iter", "len", "list", "locals", "map", "max", "memoryview", "min", "next", "object", "oct", "ord", "pow",
    "print", "property", "range", "repr", "reversed", "round", "set", "setattr", "slice", "sorted", "staticmethod",
    "str", "sum", "super", "tuple", "type", "vars", "zip")
_PR_ALIASES = {"EnvironmentError": "OSError", "IOError": "OSError", "WindowsError": "OSError"}


def _pr_builtin(v: "Any", name: "str") -> "bool":
    """`v`, held by the builtins under `name`, is the interpreter's own: a C function of a built-in module under its
    own name (`open` is `_io.open`), or a static type under its own name."""
    t = _PR_TYPE(v)
    if t is _PR_BFUNC:
        mod, fname = _PR_BF_SELF.__get__(v, t), _PR_BF_NAME.__get__(v, t)
        if _PR_TYPE(mod) is not _PR_MODULE_T or _PR_TYPE(fname) is not _PR_STR or fname != name:
            return False
        if _PR_TYPE(_PR_BUILTIN_MODULES) is _PR_TUPLE:
            for mname in _PR_BUILTIN_MODULES:  # (`_io` calls itself `io`: found by the table's name)
                if _PR_DICT.get(_PR_MODULES, mname) is mod:
                    return True
        return False
    if t is not _PR_TYPE:
        return False
    tname = _PR_T_NAME.__get__(v, _PR_TYPE)
    if _PR_TYPE(tname) is not _PR_STR or tname != _PR_DICT.get(_PR_ALIASES, name, name):
        return False
    if not _PR_T_FLAGS.__get__(v, _PR_TYPE) & _PR_HEAPTYPE:
        return True
    # `ExceptionGroup`: made at startup by C as a heap subclass of the static `BaseExceptionGroup` and `Exception`,
    # holding no member of its own but these
    mro = _PR_T_MRO.__get__(v, _PR_TYPE)
    if name != "ExceptionGroup" or _PR_TYPE(mro) is not _PR_TUPLE or _PR_TUPLE.__len__(mro) != 5 or \
            _PR_T_FLAGS.__get__(mro[1], _PR_TYPE) & _PR_HEAPTYPE or \
            _PR_T_NAME.__get__(mro[1], _PR_TYPE) != "BaseExceptionGroup":
        return False
    for k in _PR_T_DICT.__get__(v, _PR_TYPE):  # (no builtin is called before each is proven)
        if _PR_TYPE(k) is not _PR_STR or k not in ("__module__", "__weakref__", "__doc__"):
            return False
    return True


def _pr_scalar_of_notebook(v: "Any") -> "bool":
    """`v` is of a Python class subclassing a plain data type (`class S(str)`): computing with it (a hash, a compare,
    a join) runs that class's methods."""
    t = _PR_TYPE(v)
    if not _PR_T_FLAGS.__get__(t, _PR_TYPE) & _PR_HEAPTYPE:
        return False
    mro = _PR_T_MRO.__get__(t, _PR_TYPE)
    return _PR_TYPE(mro) is _PR_TUPLE and any(k in (str, bytes, int, float, complex, tuple, frozenset) for k in mro)


def _pr_data() -> "str | None":
    """`sys.NAME`/`os.NAME` of the first plain value of `sys` or `os` that is of the notebook's class (a `str`,
    `int`, `tuple` subclass: `sys.prefix`, `os.sep`, `sys.builtin_module_names`), or `sys.implementation` when it is
    not the interpreter's `SimpleNamespace` holding such values: every part of the install reads them (the library
    roots, the C functions' module by `os.name`, paths joined with `os.sep`, the cache tag), and the standard
    library's code it runs (sysconfig's paths) computes with them; else None."""
    osm = _PR_DICT.get(_PR_MODULES, "os")
    spaces = [("sys", _PR_SYS_DICT)]
    if _PR_TYPE(osm) is _PR_MODULE_T:
        spaces.append(("os", _PR_M_DICT.__get__(osm, _PR_MODULE_T)))
    for mname, md in spaces:
        for n, v in _PR_DICT.items(md):
            if _pr_scalar_of_notebook(v):
                return f"`{mname}.{n if _PR_TYPE(n) is _PR_STR else '?'}` (a value of a class of the notebook's, whose methods " \
                       "the install would run)"
    impl = _PR_DICT.get(_PR_SYS_DICT, "implementation")
    t = _PR_TYPE(impl)
    if _PR_T_FLAGS.__get__(t, _PR_TYPE) & _PR_HEAPTYPE or _PR_T_NAME.__get__(t, _PR_TYPE) != "SimpleNamespace":
        return "`sys.implementation` (not the interpreter's SimpleNamespace)"
    for v in _PR_DICT.values(_PR_OBJECT.__getattribute__(impl, "__dict__")):
        if _pr_scalar_of_notebook(v):
            return "`sys.implementation` (holding a value of a class of the notebook's, whose methods the install would run)"
    return None


def _pr_patched() -> "str | None":
    """`builtins.NAME` of the first builtin that is not the interpreter's own, or what hides the interpreter's own
    tables, or a plain value of `sys`/`os` of the notebook's class (`_pr_data`); else None."""
    if not _PR_BOOT or not _PR_MODULES or not _PR_REAL:
        return "`sys`/`builtins` (the interpreter's own could not be found from its import machinery)"
    if _PR_TYPE(_PR_BUILTIN_MODULES) is not _PR_TUPLE:
        return "`sys.builtin_module_names` (not the interpreter's tuple)"
    for name in _PR_NAMES:
        v = _PR_DICT.get(_PR_REAL, name, _PR_ALIASES)
        if v is not _PR_ALIASES and not _pr_builtin(v, name):
            return f"`builtins.{name}` (not the standard library's code)"
    held = _PR_DICT.get(_PR_MODULES, "builtins")
    if _PR_TYPE(held) is not _PR_MODULE_T or _PR_M_DICT.__get__(held, _PR_MODULE_T) is not _PR_REAL:
        return "`sys.modules['builtins']` (not the standard library's code)"
    if _PR_DICT.get(_PR_MODULES, "sys") is not _PR_SYS:
        return "`sys.modules['sys']` (not the standard library's code)"
    return _pr_data()  # (after the builtins it calls are proven)


def _pr_error(name: "str") -> "Any":
    """The interpreter's own exception class `name` (a static subclass of BaseException), found from `object`."""
    todo = [_PR_OBJECT]
    while todo:
        k = todo.pop()
        n = _PR_T_NAME.__get__(k, _PR_TYPE)
        if _PR_TYPE(n) is _PR_STR and n == name and not _PR_T_FLAGS.__get__(k, _PR_TYPE) & _PR_HEAPTYPE \
                and _PR_T_MODULE.__get__(k, _PR_TYPE) == "builtins":
            return k
        if not _PR_T_FLAGS.__get__(k, _PR_TYPE) & _PR_HEAPTYPE:  # (only the static types' own subclasses)
            todo.extend(_PR_TYPE.__dict__["__subclasses__"](k))
    return None


_PR_IMPORT_ERROR: "Any" = _pr_error("ImportError")
_PR_C_IMPORT: "Any" = _PR_DICT.get(_PR_REAL, "__import__")


def _pr_import(name: "Any", globals: "Any" = None, locals: "Any" = None, fromlist: "Any" = (),  # noqa: A002
               level: "Any" = 0) -> "Any":
    """`__import__` of CRANE's kernel-side bundle: a module already imported comes from the interpreter's table
    when it is a plain module (no `__spec__` is read, nothing of a stand-in runs); a standard-library name held by
    anything else is refused; anything else goes to the interpreter's own `__import__`."""
    if level == 0 and _PR_TYPE(name) is _PR_STR:
        m = _PR_DICT.get(_PR_MODULES, name)
        top = _PR_DICT.get(_PR_MODULES, name.partition(".")[0])
        if _PR_TYPE(m) is _PR_MODULE_T and _PR_TYPE(top) is _PR_MODULE_T:
            if not fromlist:
                return top
            md = _PR_M_DICT.__get__(m, _PR_MODULE_T)
            if _PR_TYPE(fromlist) in (_PR_TUPLE, [].__class__) and \
                    all(_PR_TYPE(n) is _PR_STR and n in md for n in fromlist):
                return m
        elif m is not None and _PR_TYPE(_PR_STDLIB_NAMES) is frozenset and \
                name.partition(".")[0] in _PR_STDLIB_NAMES and _PR_TYPE(m) is not _PR_MODULE_T:
            raise _PR_IMPORT_ERROR(f"`sys.modules[{name!r}]` is not the standard library's module")
    return _PR_C_IMPORT(name, globals, locals, fromlist, level)


def _pr_install() -> None:
    why = _pr_patched()
    if why:
        err: Any = _PR_IMPORT_ERROR if _PR_IMPORT_ERROR is not None else _PR_TYPE
        raise err(f"the notebook replaced {why} before CRANE's first export: "
                  "CRANE's export is not installed in this kernel (it would call that code)")
    _PR_PRIVATE["__import__"] = _pr_import


_pr_install()

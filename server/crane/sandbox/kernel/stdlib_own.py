"""Transplant export, kernel side: the standard library's classes the export reaches are the interpreter's own.

Runs in the user's kernel (part of `_crane_transplant`, after kernel/bound.py; kernel/export.py asks
`patched_stdlib()` before any other step). CRANE binds C functions at install and gives its cloudpickle private
copies of the modules it names (kernel/bound.py), but the export still runs Python methods of standard-library
classes it cannot copy: cloudpickle's class tracker (`weakref.WeakKeyDictionary`, `WeakValueDictionary`, `KeyedRef`,
`uuid.UUID`) and dispatch table (`collections.ChainMap`), `dis`'s instructions, the codec of a text file
(`codecs`, `encodings.utf_8`), pyzmq's socket options (`enum`), the miniature's `random.Random`, `isinstance`
against an ABC (`abc`, `_collections_abc`); C code of numpy reads `pickle.PickleBuffer` at each call. Those methods
read their module's globals and the builtins when they run, so the notebook replacing a class there
(`weakref.ref = MyRef`) or patching a method (`weakref.WeakKeyDictionary.get = ...`) would have the export call it.

So before anything is read, every class in the namespaces of `_SO_MODULES` (and every name that held a class at
install), and every member of their Python classes, bases and metaclasses, must be the installation's own: a
function whose code object EQUALS what the installation compiles for its file (by what cannot be copied: the code
itself, not its file name — `code.replace(co_filename=...)` or a class of the same name and module with such a
method does not pass): a frozen module's code against `_imp.get_frozen_object`, a file's against its byte-code
cache when that is valid for the source (the import's own check), else against the source compiled here; its
globals that module's namespace as the interpreter's table holds it under the name the file's path gives (a
library's that patched it at import too: typing_extensions); its closure's contents and defaults passing the same
way (a partial or `lru_cache` wrapper only of such functions); or `namedtuple`'s generated code. A C function,
descriptor or type (not a heap type, or an immutable one: Python cannot make either); a
property/classmethod/staticmethod over such; an instance of such a class, or another callable, only as the very
object it was at install. Else the export is refused, naming it. The modules' functions are asked
about at the install only (CRANE binds them as they are then): after it, CRANE's code calls none of them, and
test_export_stdlib_classes shows the stdlib methods the export runs calling none either. A patch made before the
install is found the same way, at the install: `_crane_transplant` then refuses to install, naming it
(transplant.py installs it before CRANE's cloudpickle, whose module body makes a `WeakKeyDictionary`; only
shield.py, library.py (`sysconfig.get_paths()`) and bound.py run before this check). What an object holds is
proven too, not only its class: an instance of a standard-library Python class held by a class or function
(`functools.cached_property(hook)`, `types.DynamicClassAttribute(hook)`, `abc.abstractproperty(hook)`) passes only
when its `__dict__`, slots and C base state hold nothing but such values (`_so_state`); a module held by a checked
namespace must be the one the interpreter's table holds under its name (`posixpath.os = stand_in`, or a plain-module
stand-in at `sys.modules[NAME]` that the other modules did not import); a plain value of a subclass of a data type
(`os.sep = MyStr('/')`, `sysconfig._INSTALL_SCHEMES = MyDict(...)`), and at install any instance of a Python class
in a checked namespace (`dataclasses._FIELD`, whose `name` the install hashes), must run nothing of the notebook's
(`os.environ` excepted: CRANE reads it by exact type alone; `sys`'s and `os`'s plain values are proven first, by
kernel/pristine.py). Not checked: a stdlib class under another stdlib name (`io.BytesIO = io.StringIO`: no notebook
code runs, a different behaviour); instances in a module's plain containers (`threading._active`), which the install
does not read.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _HEAPTYPE,
    _MODULES,
    _O_DICT_GET,
    _SEP,
    _STDLIB_NAMES,
    _SYS,
    _T_FLAGS,
    _T_QUALNAME,
    _BuiltinFunctionType,
    _ClassMethodDescriptorType,
    _cls_dict,
    _CodeType,
    _FunctionType,
    _GetSetDescriptorType,
    _lru_wrapped,
    _mdict,
    _MemberDescriptorType,
    _MethodDescriptorType,
    _MethodType,
    _module,
    _ModuleType,
    _mro,
    _os_stat,
    _SimpleNamespace,
    _type_name_of,
    _WrapperDescriptorType,
)
from crane.sandbox.kernel.library import (  # kernel: strip
    _LIB_ROOTS,
    _lb_realpath,
    base_roots,
    is_library,
    library_roots,
)
from crane.sandbox.kernel.shield import SH_NOT_OWN, own_c, private_open  # kernel: strip

# the modules whose Python classes the export's steps (and the library C code they call) reach
_SO_MODULES = ("abc", "_collections_abc", "collections", "weakref", "_weakrefset", "uuid", "dis", "opcode", "pickle",
               "copyreg", "enum", "random", "codecs", "encodings", "encodings.utf_8", "io", "types", "typing",
               "dataclasses", "functools", "operator", "copy", "builtins", "os")
# checked at install only (their functions too): what the install itself runs (sysconfig's paths, `re.compile`,
# the import machinery for a module not loaded yet, CRANE's cloudpickle's module body) and what the parts bind
_SO_INSTALL_MODULES = (*_SO_MODULES, "posixpath", "ntpath", "genericpath", "stat", "time", "threading", "sysconfig",
                       "re", "re._compiler", "re._parser", "re._constants", "select", "ast", "math", "__future__",
                       "importlib._bootstrap", "importlib._bootstrap_external", "platform", "struct")
# "module": "name=qualname ...": each name of those modules that holds, in an interpreter as installed (3.11-3.13,
# with IPython, numpy, pandas, TensorFlow, JAX, torch, polars imported), a class of another name; any other name
# holding a class holds one of its own name (`collections.OrderedDict = dict`, `weakref.ref = weakref.WeakMethod`:
# another standard class under the name is refused at install; tests/sandbox/test_install_runs_nothing.py checks
# the table against every interpreter here)
_SO_ALIASES = {
    "_collections_abc": "EllipsisType=ellipsis FunctionType=function __loader__=FrozenImporter framelocalsproxy=FrameLocalsProxy str_iterator=str_ascii_iterator zip_iterator=zip",
    "_weakrefset": "ref=ReferenceType",
    "abc": "__loader__=FrozenImporter",
    "ast": "_ast_Ellipsis=Ellipsis",
    "codecs": "__loader__=FrozenImporter",
    "collections": "_chain=chain _itemgetter=itemgetter _repeat=repeat _starmap=starmap",
    "copy": "error=Error",
    "copyreg": "_new_type=builtin_function_or_method",
    "dataclasses": "FunctionType=function",
    "enum": "EnumMeta=EnumType MappingProxyType=mappingproxy _EnumDict=EnumDict",
    "functools": "_CacheInfo=CacheInfo",
    "genericpath": "__loader__=FrozenImporter",
    "importlib._bootstrap": "__loader__=FrozenImporter",
    "importlib._bootstrap_external": "_NamespaceLoader=NamespaceLoader __loader__=FrozenImporter _code_type=code",
    "io": "__loader__=FrozenImporter",
    "ntpath": "__loader__=FrozenImporter",
    "os": "__loader__=FrozenImporter error=OSError",
    "pickle": "FunctionType=function",
    "posixpath": "__loader__=FrozenImporter",
    "random": "_Sequence=Sequence _Set=Set _accumulate=accumulate _repeat=repeat",
    "re._compiler": "error=PatternError",
    "re._constants": "error=PatternError",
    "re._parser": "error=PatternError",
    "re": "error=PatternError",
    "select": "error=OSError",
    "stat": "__loader__=FrozenImporter",
    "threading": "ExceptHookArgs=_ExceptHookArgs Lock=lock ThreadError=RuntimeError _CRLock=RLock _LockType=lock _PyRLock=_RLock _count=count _deque=deque _islice=islice local=_local",
    "time": "__loader__=BuiltinImporter",
    "types": "AsyncGeneratorType=async_generator BuiltinFunctionType=builtin_function_or_method BuiltinMethodType=builtin_function_or_method CellType=cell ClassMethodDescriptorType=classmethod_descriptor CodeType=code CoroutineType=coroutine EllipsisType=ellipsis FrameType=frame FunctionType=function GeneratorType=generator GetSetDescriptorType=getset_descriptor LambdaType=function MappingProxyType=mappingproxy MemberDescriptorType=member_descriptor MethodDescriptorType=method_descriptor MethodType=method MethodWrapperType=method-wrapper ModuleType=module TracebackType=traceback WrapperDescriptorType=wrapper_descriptor",
    "typing": "MethodDescriptorType=method_descriptor MethodWrapperType=method-wrapper Text=str WrapperDescriptorType=wrapper_descriptor _NamedTuple=NamedTuple _TypedDict=TypedDict _alias=_SpecialGenericAlias",
    "uuid": "bytes_=bytes int_=int",
    "weakref": "ref=ReferenceType",
}
_SO_C = (_BuiltinFunctionType, _MethodDescriptorType, _WrapperDescriptorType, _ClassMethodDescriptorType,
         _GetSetDescriptorType, _MemberDescriptorType)
_SO_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
_SO_NAMEDTUPLE_GLOBALS = frozenset(("_tuple_new", "__builtins__", "__name__"))
_SO_CALLABLE = callable
_SO_LITERALS = (str, bytes, int, float, complex, bool, type(None), type(...))
_SO_PROVEN: dict = {}  # id of a function -> (it, its code, its globals) when its code was found the installation's
_SO_PARTIAL = dict.get(_mdict(_module("_functools")), "partial")
_SO_LRU = dict.get(_mdict(_module("_functools")), "_lru_cache_wrapper")
_SO_METHOD_WRAPPER = type(object().__str__)
# the C state of a base type the standard library subclasses (`abc.abstractproperty`), read by its C descriptors
_SO_C_STATE = {property: ("fget", "fset", "fdel"), classmethod: ("__func__",), staticmethod: ("__func__",)}
if _SO_PARTIAL is not None:
    _SO_C_STATE[_SO_PARTIAL] = ("func", "args", "keywords")
_SO_REF = dict.get(_mdict(_module("_weakref")), "ref")
# plain data the standard library's code computes with (hashes, compares, joins): a value of a subclass of one of these
# in a checked module's namespace is the notebook's class's, whose methods would run (`os.sep = MyStr('/')`)
_SO_DATA_BASES = (str, bytes, int, float, complex, tuple, frozenset, dict, list, set)
# read only by CRANE, through its own storage, by exact type (kernel/shield.environ_strings); the install's stdlib code
# does not read it (sysconfig's default scheme)
_SO_BOUND_ONLY = (("os", "environ"),)
_SO_DATA_MAX = 100_000  # values proven in one member's state, at most (more: refused)
_so_frozen_object = own_c("_imp", "get_frozen_object")
_so_marshal_loads = own_c("marshal", "loads")
# the notebook's profile/trace hooks for new threads (`threading.setprofile`): CRANE's entry points turn them off
_SO_HOOKS = ("_profile_hook", "_trace_hook")
_SO_CLASS_NAMES: set = set()  # (id of a module's namespace, name) that held a class at install
_SO_AT_INSTALL: dict = {}
_SO_CLASS_AT: dict = {}  # (id of a module's namespace, name) -> the class it held at install
_SO_SEEN: dict = {}  # id -> each namespace and class `_so_install` took (held: ids stay theirs)  # (id of a namespace, name) -> the callable it held at install


def _so_stdlib_namespaces() -> dict:
    """id of a namespace -> the `<frozen NAME>` file names it may hold code of: each name the interpreter's table
    has it under (3.13's `_collections_abc` is also `collections.abc`, and says so in its `__name__`)."""
    out: dict = {}
    for name, m in list(dict.items(_MODULES)):
        if type(name) is str and type(m) is _ModuleType and name.partition(".")[0] in _STDLIB_NAMES:
            out.setdefault(id(_mdict(m)), set()).add(f"<frozen {name}>")
    return out


def _so_plain_code(code: Any) -> bool:
    """`code` and the code objects nested in it hold only what a compiler makes (exact str names, exact bytes
    tables, constants of the literal types): comparing it with a reference runs nothing (a str subclass's `__eq__`,
    an object's `__hash__` in a frozenset constant would run)."""
    todo = [code]
    while todo:
        c = todo.pop()
        if type(c) is not _CodeType:
            return False
        if not (type(c.co_name) is str and type(c.co_qualname) is str and type(c.co_filename) is str
                and type(c.co_linetable) is bytes and type(c.co_exceptiontable) is bytes):
            return False
        consts = list(c.co_consts)
        while consts:
            k = consts.pop()
            t = type(k)
            if t is _CodeType:
                todo.append(k)
            elif t is tuple or t is frozenset:
                consts.extend(k)
            elif t not in _SO_LITERALS:
                return False
    return True


def _so_read(path: str) -> Any:
    """The bytes of the file `path` (through `_io.open`, bound at install), or None."""
    try:
        fh = private_open(path, "rb")
    except (OSError, ValueError, TypeError):
        return None
    try:
        return fh.read()
    except (OSError, ValueError):
        return None
    finally:
        fh.close()


def _so_file_code(path: str, cached: bool = True) -> Any:
    """The code object the installation's import makes of the source file `path`: its byte-code cache when that is
    valid for the source as it is now (the import's own check: magic number, timestamp and size), else the source
    compiled here (privately: no import, no hook); None when neither can be read."""
    try:
        st = _os_stat(path)
    except (OSError, ValueError, TypeError):
        return None
    cache = _so_cache_path(path) if cached else None
    data = _so_read(cache) if cache else None
    magic = dict.get(_mdict(_module("_frozen_importlib_external")), "MAGIC_NUMBER")
    if type(data) is bytes and type(magic) is bytes and len(data) > 16 and data[:4] == magic \
            and int.from_bytes(data[4:8], "little") == 0 \
            and int.from_bytes(data[8:12], "little") == st[8] & 0xFFFFFFFF \
            and int.from_bytes(data[12:16], "little") == st[6] & 0xFFFFFFFF:
        try:
            return _so_marshal_loads(data[16:])
        except (ValueError, EOFError, TypeError):
            pass
    source = _so_read(path)
    if type(source) is not bytes:
        return None
    try:
        return compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def _so_cache_path(path: str) -> str | None:
    """Where the import keeps `path`'s byte code unoptimised (`__pycache__/NAME.TAG.pyc`), or None (no tag, a
    `pycache_prefix`: the source is compiled instead; under `-O` the cache's code differs from the functions', and
    `_so_reference` compiles the source)."""
    impl = _SYS.get("implementation")
    tag = _O_DICT_GET(impl, "__dict__").get("cache_tag") if type(impl) is _SimpleNamespace else None
    if type(tag) is not str or _SYS.get("pycache_prefix") is not None or not path.endswith(".py"):
        return None
    head, sep, tail = path.rpartition(_SEP)
    return f"{head}{sep}__pycache__{_SEP}{tail[:-3]}.{tag}.pyc"


def _so_index(code: Any) -> dict:
    """(first line, name) -> [the code objects of `code`, nested ones included, starting there]."""
    out: dict = {}
    todo = [code]
    while todo:
        c = todo.pop()
        out.setdefault((c.co_firstlineno, c.co_name), []).append(c)
        todo.extend(k for k in c.co_consts if type(k) is _CodeType)
    return out


def _so_reference(fn: str, g: dict, memo: dict) -> Any:
    """The index (`_so_index`) of what the installation compiles for the code file `fn` whose functions have the
    namespace `g`, or None where `g` is not that file's module's namespace: a frozen module's (`<frozen NAME>`) when
    `g` is the table's namespace under NAME; a file's when `g` is the table's namespace of the module the file is by
    its path (`_so_file_module`)."""
    key = ("\x00ref", fn, id(g))
    if key in memo:
        return memo[key]
    ref = None
    if fn.startswith("<frozen "):
        spaces = memo.get("\x00ns")
        if spaces is None:
            spaces = memo["\x00ns"] = _so_stdlib_namespaces()
        if fn in spaces.get(id(g), ()):
            for name in sorted(spaces[id(g)]):  # (`<frozen importlib._bootstrap>`: frozen as `_frozen_importlib`)
                try:
                    code = _so_frozen_object(name[8:-1])
                except (ImportError, ValueError, TypeError):
                    continue
                if type(code) is _CodeType:
                    ref = _so_index(code)
                    break
    elif _so_file_module(fn, g):
        code = _so_file_code(fn, cached=not memo.get(("\x00compiled", fn)))
        ref = _so_index(code) if type(code) is _CodeType else None
    memo[key] = ref
    return ref


def _so_file_module(fn: str, g: dict) -> bool:
    """`g` is the namespace the interpreter's table holds under `g['__name__']`, and that name is the module the
    library file `fn` is by its path: its dotted tail (`.../collections/abc.py` is `collections.abc`), every part a
    name, what is left the nearest root of the installation holding it or a folder no module can be named by
    (`python3.11`, `site-packages`). (A notebook's module claiming the file's `__file__` is not it.)"""
    name = dict.get(g, "__name__")
    if type(name) is not str or not is_library(fn) or _mdict(_module(name)) is not g:
        return False
    parts = name.split(".")
    if not all(type(p) is str and p.isidentifier() for p in parts):
        return False
    real = _lb_realpath(fn)
    tail = _SEP.join(parts)
    for end in (f"{_SEP}{tail}.py", f"{_SEP}{tail}{_SEP}__init__.py"):
        if real.endswith(end):
            left = real[: len(real) - len(end)] + _SEP
            roots = [r for r in (_LIB_ROOTS[0] if _LIB_ROOTS else base_roots()) if real.startswith(r)]
            if left == max(roots, key=len, default=None) or not left[:-1].rpartition(_SEP)[2].isidentifier():
                return True
    return False


def _so_function(f: Any, memo: dict) -> bool:
    """A Python function of the installation: its code object equal to the one the installation compiles from its
    file (a library's: the standard library's, or a library's that patched it at import: typing_extensions replaces
    `typing._collect_parameters`), or from its frozen module, with that module's namespace as its globals; or
    `namedtuple`'s generated `__new__`. Its closure's contents and its defaults pass as the members do (a function
    of the standard library's code holding a notebook function in a cell would call it). A code object whose file
    name, or anything else, was copied onto other code (`code.replace(co_filename=...)`) is not equal to it."""
    key = ("\x00fn", id(f))
    held = memo.get(key)
    if held is not None:
        return held[1]
    memo[key] = (f, True)  # (a function reached again while it is checked: its other parts decide)
    ok = _so_function_proof(f, memo)
    memo[key] = (f, ok)
    return ok


def _so_function_proof(f: Any, memo: dict) -> bool:
    g, code = f.__globals__, f.__code__
    fn = code.co_filename
    if type(fn) is not str or type(g) is not dict:
        return False
    kept = _SO_PROVEN.get(id(f))
    if kept is not None and kept[0] is f and kept[1] is code and kept[2] is g:
        pass  # (the same code and namespace as when proven: the code is not compared again)
    elif fn == "<string>":
        gname = dict.get(g, "__name__")
        if not (type(gname) is str and gname.startswith("namedtuple_") and frozenset(g) <= _SO_NAMEDTUPLE_GLOBALS):
            return False
    else:
        if not _so_plain_code(code):
            return False
        ref = _so_reference(fn, g, memo)
        if ref is None or not any(r == code for r in ref.get((code.co_firstlineno, code.co_name), ())):
            if fn.startswith("<") or memo.get(("\x00compiled", fn)):
                return False
            memo[("\x00compiled", fn)] = True  # (not the byte-code cache's: the source compiled, once, decides)
            memo.pop(("\x00ref", fn, id(g)), None)
            ref = _so_reference(fn, g, memo)
            if ref is None or not any(r == code for r in ref.get((code.co_firstlineno, code.co_name), ())):
                return False
        _SO_PROVEN[id(f)] = (f, code, g)
    cells = f.__closure__ or ()
    for i, cell in enumerate(cells):
        try:
            v = cell.cell_contents
        except ValueError:  # (an empty cell)
            continue
        if not _so_value(v, f, f"<closure {i}>", memo):
            return False
    defaults = [*(f.__defaults__ or ()), *dict.values(f.__kwdefaults__ or {})]
    return all(_so_value(v, f, "<default>", memo) for v in defaults)


def _so_is_class(v: Any) -> bool:
    return any(k is type for k in _mro(type(v)))


def _so_c_type(t: Any) -> bool:
    flags = _T_FLAGS.__get__(t, type)
    return not flags & _HEAPTYPE or bool(flags & _SO_IMMUTABLE)


def _so_kept(v: Any) -> bool:
    """A value that passes only as what it was at install: a C callable other than a function or descriptor
    (`functools.partial`, an lru_cache wrapper), or an instance of a Python class (an enum member, a
    `cached_property`)."""
    t = type(v)
    return not _so_c_type(t) or _SO_CALLABLE(v)


def _so_value(v: Any, owner: Any, name: str, memo: dict) -> bool:
    """The member `name` of `owner` (a class, or a module's namespace) holding `v` is the interpreter's own."""
    t = type(v)
    if t is _FunctionType:
        return _so_function(v, memo)
    if t in _SO_C:
        return True
    if t is staticmethod or t is classmethod or t is _MethodType:
        return _so_value(v.__func__, owner, name, memo)
    if t is property:
        return all(f is None or _so_value(f, owner, name, memo) for f in (v.fget, v.fset, v.fdel))
    if _so_is_class(v):
        return _so_class(v, memo) is None
    if t is _ModuleType:
        return _so_module_ref(v, name)
    if _so_class(t, memo) is not None:
        return False  # an object of a class that is not the standard library's (a descriptor, a callable)
    if owner is None or type(owner) is _FunctionType:  # (a function's closure or defaults, a partial's parts)
        return _so_held(v, memo)
    if not _so_held(v, memo):
        return False  # a C callable calling what is not proven (`functools.partial(hook)`): even at the first install
    return not _so_kept(v) or dict.get(_SO_AT_INSTALL, (id(owner), name)) is v


def _so_state(v: Any, memo: dict) -> bool:
    """`v`, an instance of a Python class proven the standard library's (`_so_class`), holds nothing that would run
    the notebook's code when its class's own code reads it: the class is proven, but what the instance holds is not
    (`functools.cached_property(hook)`, `types.DynamicClassAttribute(hook)`, `abc.abstractproperty(hook)` set on a
    class the install reads, a `str` subclass in an instance's `__dict__`). Its `__dict__`, its slots and the C
    state of a `property`/`classmethod`/`staticmethod`/`functools.partial` base (read by their C descriptors) pass
    as a proven function's closure does (`_so_data`)."""
    key = ("\x00st", id(v))
    held = memo.get(key)
    if held is not None:
        return held[1]
    memo[key] = (v, True)  # (reached again while it is checked: its other parts decide)
    parts: list = []
    for k in _mro(type(v)):
        for n in _SO_C_STATE.get(k, ()):
            try:
                parts.append(_cls_dict(k)[n].__get__(v, k))
            except AttributeError:
                pass
        if not _so_c_type(k):
            for d in list(_cls_dict(k).values()):
                if type(d) is _MemberDescriptorType:  # (a slot)
                    try:
                        parts.append(d.__get__(v, k))
                    except AttributeError:
                        pass
    try:
        d = _O_DICT_GET(v, "__dict__")  # (the class is proven: its `__dict__` is the interpreter's slot)
    except AttributeError:
        d = {}
    if type(d) is not dict:
        ok = d is None
    else:
        parts.extend(dict.keys(d))
        parts.extend(dict.values(d))
        ok = True
    ok = ok and _so_data(parts, memo)
    memo[key] = (v, ok)
    return ok


def _so_data(values: list, memo: dict) -> bool:
    """Every value of `values` runs nothing of the notebook's when the standard library's code uses it: data of the
    exact literal types, exact containers of such values (their items, keys included, in turn; `_SO_DATA_MAX` items
    at most), a module only as the interpreter's table holds it under its own name, anything else as `_so_value`
    proves a function's closure."""
    todo, budget = list(values), _SO_DATA_MAX
    while todo:
        x = todo.pop()
        t = type(x)
        budget -= 1
        if budget < 0:
            return False
        if t in _SO_LITERALS:
            continue
        if t is tuple or t is list or t is frozenset or t is set:
            todo.extend(x)
        elif t is dict:
            todo.extend(dict.keys(x))
            todo.extend(dict.values(x))
        elif t is _ModuleType:
            if not _so_module_ref(x):
                return False
        elif not _so_value(x, None, "", memo):
            return False
    return True


def _so_module_ref(m: Any, bound: str = "") -> bool:
    """The module `m`, held by a checked namespace or object (under the name `bound`), is the one the interpreter's
    table holds under the name it gives itself, or under `bound` (`collections._collections_abc` calls itself
    `collections.abc`; 3.11's `io._io` calls itself `io`): a plain module of the notebook's (`posixpath.os =
    stand_in`), or the module a stand-in at `sys.modules[NAME]` took the place of, is not (the standard library's
    code would look names up in it)."""
    name = dict.get(_mdict(m), "__name__")
    return type(name) is str and dict.get(_MODULES, name) is m or bool(bound) and dict.get(_MODULES, bound) is m


def _so_held(v: Any, memo: dict) -> bool:
    """`v`, in a proven function's closure or defaults (its class proven by `_so_value`), calls nothing but the
    installation's code: plain data, an instance of a Python class (its class is the standard library's), a
    `functools.partial` of such callables and arguments, an `lru_cache` wrapper of such a function, a C slot bound
    to an object of such a class. Class and module members are asked too: a C callable of another kind there, or
    one calling what is not proven, refuses even at the first install (where "as at install" proves nothing)."""
    t = type(v)
    if not _so_c_type(t):
        return _so_state(v, memo)
    if not _so_kept(v):
        return True
    if t is _SO_PARTIAL:
        return all(_so_value(x, None, "", memo) for x in (v.func, *v.args, *dict.values(v.keywords)))
    if t is _SO_METHOD_WRAPPER:  # (`itertools.count().__next__`: a C slot of its object's type, Python's if a class's)
        return _so_value(type(v.__self__), None, "", memo)
    if t is _SO_REF:  # (a weak reference calls its callback alone: the referent is not called)
        cb = v.__callback__
        return cb is None or _so_value(cb, None, "", memo)
    if t is _SO_LRU:  # (the function it calls, never its `__wrapped__`, which may be set to anything)
        wrapped = _lru_wrapped(v)
        return type(wrapped) is _FunctionType and _so_function(wrapped, memo)
    return False


def _so_members(k: Any, memo: dict) -> str | None:
    """`module.Class.member` of the first member of the class `k`'s own namespace that is not the interpreter's."""
    for n, v in list(_cls_dict(k).items()):
        if not _so_value(v, k, n, memo):
            return f"{_type_name_of(k)}.{n}"
    return None


def _so_class(cls: Any, memo: dict) -> str | None:
    """None when every Python class of `cls`'s MRO and of its metaclass's holds only the interpreter's own members;
    else `module.Class.member` of the first that does not."""
    key = id(cls)
    if key in memo:
        return memo[key]
    memo[key] = None  # (a class reached again while it is checked)
    bad = None
    for k in (*_mro(cls), *_mro(type(cls))):
        if _so_c_type(k):
            continue
        if id(k) not in memo or k is cls:
            memo[id(k)] = None
            memo[id(k)] = bad = _so_members(k, memo)
        else:
            bad = memo[id(k)]
        if bad:
            break
    memo[key] = bad
    return bad


def _so_namespaces(modules: tuple = _SO_MODULES) -> list:
    return [(m, _mdict(_module(m))) for m in modules]


def _so_alias(mname: str, n: str, cls: Any) -> str | None:
    """`module.name` holding a class not of that name (nor of the name the standard library itself puts there):
    another class swapped in before the install, else None."""
    qual = _T_QUALNAME.__get__(cls, type)
    if type(qual) is not str or qual == n or str.startswith(n, "__"):  # (`__loader__`: a built-in module's is a class)
        return None
    for entry in str.split(dict.get(_SO_ALIASES, mname, "")):
        name, _, quals = str.partition(entry, "=")
        if name == n and qual in str.split(quals, "|"):
            return None
    return f"`{mname}.{n}` (the class `{qual}`: not the standard library's code under that name)"


def patched_stdlib(functions: bool = False, modules: tuple = _SO_MODULES) -> str | None:
    """The first class of `_SO_MODULES` (a name holding a class now or at install) that is not the installation's
    own, or has a member that is not, named for the refusal; else None. `functions`: the modules' other callables
    too (at install: CRANE binds functions as they are then). At an export they are not asked about: CRANE's own
    code calls none of them (bound at install, private copies for its cloudpickle), and the function sweep of
    test_export_by_construction shows the stdlib classes' methods the export runs calling none either."""
    memo: dict = {}
    spaces = _so_namespaces(modules)
    _so_install([md for _, md in spaces if md and id(md) not in _SO_SEEN])
    for mname, md in spaces:
        for n, v in list(dict.items(md)):
            if _so_is_class(v):
                bad = _so_class(v, memo)
                if bad:
                    return f"`{mname}.{n}` (`{bad}` is not the standard library's code)"
                held = dict.get(_SO_CLASS_AT, (id(md), n), v)
                if held is not v:
                    return f"`{mname}.{n}` (another class than the one installed: not the standard library's code)"
                swapped = _so_alias(mname, n, v) if functions and mname != "builtins" else None
                if swapped:
                    return swapped
            elif (functions or (id(md), n) in _SO_CLASS_NAMES) and mname != "builtins" and _SO_CALLABLE(v) \
                    and not (mname == "threading" and n in _SO_HOOKS) \
                    and not _so_value(v, md, n, memo):
                return f"`{mname}.{n}` (not the standard library's code)"
            elif mname != "builtins" and not _SO_CALLABLE(v):
                bad = _so_module_value(mname, n, v, memo, functions)
                if bad:
                    return bad
    return None


def _so_module_value(mname: str, n: str, v: Any, memo: dict, install: bool) -> str | None:
    """Why the module `mname`'s plain value `n` would have the standard library's code run the notebook's, or None
    (a module's plain values are read, hashed, compared, joined by its functions and by CRANE's install): a module
    there must be the one the interpreter's table holds under its own name (`posixpath.os = stand_in`, a stand-in
    at `sys.modules['os']` that the other modules did not import); a value of a subclass of a plain data type
    (`os.sep = MyStr('/')`, `sysconfig._INSTALL_SCHEMES = MyDict(...)`) must be of a class running nothing of the
    notebook's, and hold nothing that does; at `install`, any instance of a Python class too (`dataclasses._FIELD`,
    whose `name` CRANE's cloudpickle's module body hashes: the install runs the standard library's code that reads
    them; after it, CRANE's code reads none of them: it bound what it uses)."""
    t = type(v)
    if t is _ModuleType:
        if _so_module_ref(v, n):
            return None
        return (f"`{mname}.{n}` (a module that is not the one the interpreter's table holds under its name: not the "
                "standard library's code)")
    if _so_c_type(t) or (mname, n) in _SO_BOUND_ONLY or \
            not (install or any(k in _SO_DATA_BASES for k in _mro(t))):
        return None
    if _so_class(t, memo) is None and _so_state(v, memo):
        return None
    return (f"`{mname}.{n}` (a value of the class `{_type_name_of(t)}`, running or holding code that is not the "
            "standard library's)")


def _so_install(namespaces: list) -> None:
    """What passes only as it was at install (`_so_kept`), by its owner (a class, a module's namespace) and name; a
    module of `_SO_MODULES` imported since (by CRANE's cloudpickle, or the notebook) is taken when first checked."""
    todo: list = list(namespaces)
    while todo:
        owner = todo.pop()
        if id(owner) in _SO_SEEN:
            continue
        _SO_SEEN[id(owner)] = owner
        items = dict.items(owner) if type(owner) is dict else _cls_dict(owner).items()
        for n, v in list(items):
            if _so_is_class(v):
                if type(owner) is dict:
                    _SO_CLASS_NAMES.add((id(owner), n))
                    _SO_CLASS_AT[(id(owner), n)] = v
                todo.extend(k for k in (*_mro(v), *_mro(type(v))) if not _so_c_type(k))
            elif type(v) not in _SO_C and type(v) is not _FunctionType and _so_kept(v):
                _SO_AT_INSTALL[(id(owner), n)] = v


_so_install([md for _, md in _so_namespaces()])
_SO_BEFORE = (f"`{SH_NOT_OWN[0]}` (not the interpreter's own C function: not the standard library's code)"
              if SH_NOT_OWN else patched_stdlib(functions=True, modules=_SO_INSTALL_MODULES))
if _SO_BEFORE:  # patched before CRANE's first export: installing the export's other parts would call it
    raise ImportError(f"the notebook replaced {_SO_BEFORE} before CRANE's first export: CRANE's export is not "
                      "installed in this kernel (it would call that code)")
library_roots()  # sysconfig's paths too, now that its code, os's and posixpath's are proven the standard library's

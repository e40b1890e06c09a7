"""Portable sandbox, worker side: other C extensions' native writers, vetted where they are defined (round 10, the
guard alone). h5py, torch and TensorFlow open, create, rename and delete files in C/C++ (HDF5's `H5Fcreate`, torch's
`PyTorchFileWriter`, TensorFlow's file system and its kernels): no Python `open`, so no audit event, and a cell can
reach them without the Python functions of the guard table (`h5py.h5f.create`, `torch._C._save_jit_module`,
`tf.raw_ops.WriteFile`, `tf.io.gfile.GFile`). Each is replaced where it is defined — in its extension module's dict
(and the modules that re-export it), or in its type's own dict (any route to the method meets it) — by one that vets
the path argument as the guard table's writers are (worker/arrow.py's `_ArrowVet`: inside the cell's working folder it
is made ready and the call goes on, else the run is `blocked`, naming the call and the path). The targets are put in
arrow.py's `_ARROW_TARGETS`: patched at set-up where the library is loaded, else right after the cell's import of it.

- h5py: `h5f.create`, `h5f.open` for writing (`ACC_RDWR`, its default), and the property lists that name other files
  (`PropDCID.set_external`, `PropFAID.set_fapl_log`, `set_fapl_split`'s extensions); round 16 (F8): the member files
  of the family and split/multi drivers, named after the path (`part%d.h5`: part0.h5, ...; `store-m.h5`), made ready;
- torch: `PyTorchFileWriter` made on a path (`torch.save`'s writer), `ScriptModule.save`/`_save_for_mobile`,
  `torch._C._save_jit_module`/`_save_mobile_module`/`_save_parameters`, `from_file`/`UntypedStorage.from_file`
  with `shared=True` (a writable shared mapping of the file);
- TensorFlow: the file system's calls (`_pywrap_file_io`: `WritableFile`, `DeleteFile`, `RenameFile`, `CopyFile`,
  `CreateDir`, `DeleteRecursively`, ...), `TFRecordWriter`'s `RecordWriter`, and every eager op execution
  (`TFE_Py_FastPathExecute`, `TFE_Py_Execute`): an op of `_TF_WRITE_OPS` (`WriteFile`, `SaveV2`,
  `MergeV2Checkpoints`, `CreateSummaryFileWriter`, `SaveDataset`, `DatasetToTFRecord`, `PrintV2` to a file, ...) has
  its path inputs vetted (a checkpoint prefix: every existing file named after it made ready too); round 13: the
  debugger's events writer, `EventsWriter`, the profiler's session, tfprof's outputs, MLIR's bytecode writer,
  tfcompile's outputs, and a graph run by a v1 `Session` (its GraphDef read before each run for the write ops);
  native code loading (`TF_LoadLibrary`) and native servers and remote contexts refused;
- round 16 (F8): tokenizers' `Tokenizer.save` and `models.Model.save` (Rust), safetensors' `serialize_file`.
Not covered (docs/sandbox.md): ops that run inside a compiled graph (`tf.function`, a loaded SavedModel) or a
TorchScript function (`aten::save`, `aten::from_file` through `torch.ops`), whose kernels run in C++ with no Python
call per op; the Linux layer (Landlock) holds those under the portable sandbox.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import Any

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.worker.guard import _URL, replace_type_method  # kernel: strip


def _nv_text(path: Any) -> Any:
    """A path argument as the one plain `str`/`bytes` both vetted and handed on (a path-like's `__fspath__`, or a
    `str` subclass's `encode`/`__eq__`, could answer differently the second time); anything else as it is. Also
    arrow.py's (pyarrow's and polars' writers)."""
    if isinstance(path, os.PathLike) and not isinstance(path, (str, bytes)):
        path = os.fspath(path)
    if isinstance(path, str):
        return str.__str__(path)
    if isinstance(path, bytes):
        return bytes.__bytes__(path)
    return path


def _nv_path(vet: Any, family: str, label: str, path: Any) -> Any:
    """`path` (one plain text) vetted as a write by `family`'s `label`: a URL of another scheme than file:// (a
    remote or in-memory file system of the library's own) is refused; returns the text to hand on."""
    path = _nv_text(path)
    if isinstance(path, (str, bytes)):
        text = os.fsdecode(path)
        if _URL.match(text) and not text.startswith("file://"):
            vet.refuse(f"a call to {family}: {label} (writing to a URL: {text[:200]!r})", None)
        vet.path(label, path, family)
    return path


def _nv_prefix(vet: Any, family: str, label: str, prefix: Any) -> None:
    """A writer of the files named `prefix` + a suffix (TensorFlow's checkpoints: `prefix.index`,
    `prefix.data-...`, `prefix_temp/`): the prefix vetted, and every file already there named after it made ready
    (so no write follows a link of the view to the user's own file)."""
    text = _nv_path(vet, family, label, prefix)
    if not isinstance(text, (str, bytes)):
        return
    text = os.fsdecode(text)
    if text.startswith("file://"):
        text = text[len("file://"):]
    folder, base = os.path.split(text)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return
    for name in names:
        if base and name.startswith(base) and name != base:
            vet.prepare(os.path.join(folder, name))


def _nv_function(vet: Any, family: str, label: str, orig: Callable[..., Any],
                 check: Callable[[Any, tuple, dict], tuple[tuple, dict]]) -> Callable[..., Any]:
    """A function that runs `check(vet, args, kw)` (which vets and may hand on plain texts) before `orig`."""
    def call(*args: Any, **kw: Any) -> Any:
        args, kw = check(vet, args, kw)
        return orig(*args, **kw)
    call.__name__ = call.__qualname__ = getattr(orig, "__name__", label.rpartition(".")[2])
    call.__doc__ = getattr(orig, "__doc__", None)
    call.__module__ = getattr(orig, "__module__", None) or family
    return call


def _nv_arg(family: str, label: str, at: int, key: str, when: Callable[[tuple, dict], bool] = lambda a, k: True,
            prefix: bool = False) -> Callable[[Any, tuple, dict], tuple[tuple, dict]]:
    """The check of a path argument at position `at` (or keyword `key`), vetted when `when(args, kw)`."""
    def check(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
        if not when(args, kw):
            return args, kw
        if len(args) > at:
            value = args[at]
        elif key in kw:
            value = kw[key]
        else:
            return args, kw
        if prefix:
            _nv_prefix(vet, family, label, value)
            return args, kw
        value = _nv_path(vet, family, label, value)
        if len(args) > at:
            return args[:at] + (value,) + args[at + 1:], kw
        return args, {**kw, key: value}
    return check


def _nv_both(*checks: Callable[[Any, tuple, dict], tuple[tuple, dict]]) -> Callable[[Any, tuple, dict],
                                                                                     tuple[tuple, dict]]:
    def check(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
        for one in checks:
            args, kw = one(vet, args, kw)
        return args, kw
    return check


def _nv_method(vet: Any, family: str, label: str, check: Callable[[Any, tuple, dict], tuple[tuple, dict]],
               static: bool = False) -> Callable[[Any], Any]:
    """The maker of a type's method (`replace_type_method`) that vets its arguments (after `self`; a static
    method's all) before the original."""
    def make(orig: Any) -> Any:
        if static:
            inner = orig.__func__ if isinstance(orig, staticmethod) else orig
            return staticmethod(_nv_function(vet, family, label, inner, check))

        def call(self: Any, *args: Any, **kw: Any) -> Any:
            args, kw = check(vet, args, kw)
            return orig(self, *args, **kw)
        call.__name__ = call.__qualname__ = label.rpartition(".")[2]
        call.__doc__ = getattr(orig, "__doc__", None)
        return call
    return make


def _nv_replace_in(names: tuple[str, ...], orig: Any, new: Any) -> None:
    """`new` in place of `orig` in the loaded modules `names` that hold it (by any name: the library's re-exports;
    a walk of every module of a library would cost each run ~1 s where TensorFlow is loaded)."""
    for name in names:
        m = sys.modules.get(name)
        if type(m) is types.ModuleType:
            d = m.__dict__
            for attr, value in list(d.items()):
                if value is orig:
                    d[attr] = new


def _nv_module_functions(family: str, functions: dict[str, Callable[[Any, tuple, dict], tuple[tuple, dict]]],
                         types_: dict[str, dict[str, tuple[Callable[[Any, tuple, dict], tuple[tuple, dict]], bool]]]
                         | None = None) -> Callable[[types.ModuleType, Any], dict[str, Any]]:
    """A maker (arrow.py's `_ARROW_TARGETS`) for an extension module: its `functions` replaced in its dict (its
    re-exporters get them from arrow.py's table), its `types_`' methods in the types' own dicts."""
    def make(mod: types.ModuleType, vet: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, check in functions.items():
            orig = mod.__dict__.get(name)
            if callable(orig) and not getattr(orig, "__crane_vetted__", False):
                new = _nv_function(vet, family, f"{mod.__name__}.{name}", orig, check)
                new.__crane_vetted__ = True  # type: ignore[attr-defined]
                _nv_replace_in((mod.__name__,), orig, new)
                out[name] = new
        for tname, methods in (types_ or {}).items():
            t = mod.__dict__.get(tname)
            if not isinstance(t, type):
                continue
            for mname, (check, static) in methods.items():
                replace_type_method(t, mname, _nv_method(vet, family, f"{mod.__name__}.{tname}.{mname}", check,
                                                         static))
        return out
    return make


# -- h5py ----------------------------------------------------------------------------------------------------------
def _h5_writes(args: tuple, kw: dict) -> bool:
    # (`h5f.open`'s own default is ACC_RDWR: a call naming no flags opens for writing; round 16, F8)
    flags = args[1] if len(args) > 1 else kw.get("flags", 0x0001)
    return type(flags) is not int or bool(flags & 0x0001)  # H5F_ACC_RDWR (a flags value not a plain int: writes)


def _h5_split(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`set_fapl_split(meta_ext, meta_plist, raw_ext, raw_plist)`: the extensions are appended to the file's name
    (a separator in one names a file elsewhere; a `%` makes it HDF5's printf format, which may put the file's name
    anywhere in the member's: round 16, F8)."""
    for value in (args[0] if args else kw.get("meta_ext"), args[2] if len(args) > 2 else kw.get("raw_ext")):
        value = _nv_text(value)
        if isinstance(value, (str, bytes)) and any(c in os.fsencode(value) for c in (b"/", b"\\", b"%")):
            vet.refuse(f"a call to h5py: h5p.PropFAID.set_fapl_split (an extension naming another folder: "
                       f"{os.fsdecode(value)[:200]!r})", None)
    return args, kw


# round 16 (F8): HDF5's drivers that keep one file in several name the files after the name given to `h5f.create`/
# `h5f.open`, which alone was vetted: the family driver prints the member's number into it (`part%d.h5`: part0.h5,
# part1.h5, ...; a name with no conversion gets `-%06d` before its first `.`), the split and multi drivers append
# their members' extensions (`store-m.h5`/`store-r.h5`, `name-s.h5`, `-b`, `-r`, `-g`, `-l`, `-o`). The view's links
# for the members already there were written through to the user's REAL files.
_H5_ONE_FILE = ("SEC2", "STDIO", "CORE", "LOG", "DIRECT", "WINDOWS", "MPIO", "ROS3D", "fileobj_driver")
_H5_MEMBERED = ("FAMILY", "MULTI")


def _h5_member_prefix(base: str, family: bool) -> str:
    """What every member file of a family or split/multi driver named `base` starts with: `base` cut at its first
    printf conversion (`%`), or a family's name with none at its first `.` (HDF5's default `-%06d` goes there).
    Nested drivers (a family's members split, split members in families) keep to it: each appends to or prints into
    a name starting with it."""
    if "%" in base:
        return base[:base.index("%")]
    return base.split(".", 1)[0] if family else base


def _h5_members(vet: Any, label: str, name: Any, fapl: Any) -> None:
    """The files a multi-file driver writes besides `name` (already vetted): every entry of `name`'s folder that may
    be one made ready (the run's private copy) before HDF5 opens it; an access property list whose driver is none of
    HDF5's known ones is refused (its files cannot be known)."""
    h5p, h5fd = sys.modules.get("h5py.h5p"), sys.modules.get("h5py.h5fd")
    name = _nv_text(name)
    if h5p is None or h5fd is None or not isinstance(name, (str, bytes)):
        return
    faid = h5p.PropFAID
    try:
        if fapl is None:
            fapl = h5p.create(h5p.FILE_ACCESS)  # (the default list's driver: HDF5_DRIVER may name another)
        if not isinstance(fapl, faid):
            return  # refused by h5f itself
        driver = faid.get_driver(fapl)  # (the type's own: a subclass cannot answer for it)
    except Exception:  # noqa: BLE001 - a list HDF5 cannot read: h5f refuses it as well
        return
    known = {getattr(h5fd, n, None) for n in _H5_ONE_FILE} - {None, -1}
    membered = {getattr(h5fd, n, None): n for n in _H5_MEMBERED}
    if driver in known:
        return
    if driver not in membered:
        vet.refuse(f"a call to h5py: {label} (an HDF5 driver whose files are not known: {driver!r})", None)
        return
    text = os.fsdecode(name)
    if text.startswith("file://"):
        text = text[len("file://"):]
    folder, base = os.path.split(text)
    if "%" in folder:  # (a family's number printed into a folder's name: members in several folders)
        vet.refuse(f"a call to h5py: {label} (a family of files in several folders: {text[:200]!r})", None)
        return
    prefix = _h5_member_prefix(base, membered[driver] == "FAMILY")
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return
    for entry in sorted(names):
        if entry.startswith(prefix) and entry != base:
            _nv_path(vet, "h5py", label, os.path.join(folder, entry))


def _h5_open_members(label: str, at: int, when: Callable[[tuple, dict], bool] = lambda a, k: True,
                     ) -> Callable[[Any, tuple, dict], tuple[tuple, dict]]:
    """The check of `h5f.create`/`h5f.open`'s name (argument 0) and its driver's member files (`fapl`: argument
    `at`)."""
    name_check = _nv_arg("h5py", label, 0, "name", when)

    def check(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
        args, kw = name_check(vet, args, kw)
        if when(args, kw):
            _h5_members(vet, label, args[0] if args else kw.get("name"), args[at] if len(args) > at
                        else kw.get("fapl"))
        return args, kw
    return check


_H5F = _nv_module_functions("h5py", {
    "create": _h5_open_members("h5py.h5f.create", 3),
    "open": _h5_open_members("h5py.h5f.open", 2, _h5_writes)})
_H5P = _nv_module_functions("h5py", {}, {
    "PropDCID": {"set_external": (_nv_arg("h5py", "h5py.h5p.PropDCID.set_external", 0, "name"), False)},
    "PropFAID": {"set_fapl_log": (_nv_arg("h5py", "h5py.h5p.PropFAID.set_fapl_log", 0, "logfile"), False),
                 "set_fapl_split": (_h5_split, False)}})


# -- torch ---------------------------------------------------------------------------------------------------------
def _shared(at: int) -> Callable[[tuple, dict], bool]:
    def when(args: tuple, kw: dict) -> bool:
        return bool(args[at] if len(args) > at else kw.get("shared", False))
    return when


# TorchScript's file ops: op -> (its path argument, its `shared` argument (written only when shared) or None)
_TORCH_FILE_OPS: dict[str, tuple[int, int | None]] = {"aten::save": (1, None), "aten::from_file": (0, 1)}
# a script function's or method's graph -> its file ops' path sources (cached; the object kept, so its key stays its own)
_TORCH_SITES: dict[tuple, tuple[Any, tuple[tuple[str, str, Any], ...]]] = {}


def _torch_op(vet: Any, qualname: str, op: Any, shift: int = 0) -> Any:
    """`torch.ops`' callable of a file op (`op_dk` takes a dispatch key first: `shift` 1), vetting its path."""
    at, shared = _TORCH_FILE_OPS[qualname]
    label = f"torch.ops.{qualname.replace('::', '.')}"
    when = _shared(shared + shift) if shared is not None else (lambda a, k: True)
    new = _nv_function(vet, "torch", label, op, _nv_arg("torch", label, at + shift, "filename", when))
    new.__crane_vetted__ = True  # type: ignore[attr-defined]
    return new


def _torch_operations(c: types.ModuleType, vet: Any) -> None:
    """`torch._C._jit_get_operation` / `_get_operation_overload` (how `torch.ops.aten.X` gets its C callable) hand
    back vetting ones for the file ops; packets already made are given them too."""
    get, overload = c.__dict__.get("_jit_get_operation"), c.__dict__.get("_get_operation_overload")
    if callable(get) and not getattr(get, "__crane_vetted__", False):
        def jit_get_operation(name: Any, *a: Any, **k: Any) -> Any:
            got = get(name, *a, **k)
            if type(name) is str and name in _TORCH_FILE_OPS:
                if isinstance(got, tuple) and got:
                    return (_torch_op(vet, name, got[0]), *got[1:])
                return _torch_op(vet, name, got)
            return got
        jit_get_operation.__crane_vetted__ = True  # type: ignore[attr-defined]
        c.__dict__["_jit_get_operation"] = jit_get_operation
    if callable(overload) and not getattr(overload, "__crane_vetted__", False):
        def get_operation_overload(name: Any, *a: Any, **k: Any) -> Any:
            got = overload(name, *a, **k)
            if type(name) is str and name in _TORCH_FILE_OPS and isinstance(got, tuple) and len(got) > 1:
                return (_torch_op(vet, name, got[0]), _torch_op(vet, name, got[1], 1), *got[2:])
            return got
        get_operation_overload.__crane_vetted__ = True  # type: ignore[attr-defined]
        c.__dict__["_get_operation_overload"] = get_operation_overload
    ops = sys.modules.get("torch._ops")
    aten = getattr(getattr(ops, "ops", None), "aten", None)
    for qualname in _TORCH_FILE_OPS:  # (packets made before the run: `_op` of each, and of its overloads)
        packet = getattr(aten, "__dict__", {}).get(qualname.partition("::")[2])
        if packet is None:
            continue
        for one in [packet, *(v for v in vars(packet).values() if hasattr(v, "_op_dk"))]:
            if not getattr(one._op, "__crane_vetted__", False):
                one._op = _torch_op(vet, qualname, one._op)
            if hasattr(one, "_op_dk") and not getattr(one._op_dk, "__crane_vetted__", False):
                one._op_dk = _torch_op(vet, qualname, one._op_dk, 1)


def _torch_script_sites(fn: Any, method: bool) -> tuple[tuple[str, str, Any], ...]:
    """A script function's or method's file ops (its inlined graph: the functions it calls are in it), each with
    its path's source: ("const", text), ("arg", index among the call's arguments) or ("unknown", None); a
    `from_file` whose `shared` is a constant false writes nothing."""
    owner = fn.owner if method else fn
    key = ("m", hash(owner), fn.name) if method else ("f", id(fn))
    if key in _TORCH_SITES:
        return _TORCH_SITES[key][1]
    graph = fn.inlined_graph
    inputs = list(graph.inputs())
    sites: list[tuple[str, str, Any]] = []
    for qualname, (at, shared) in _TORCH_FILE_OPS.items():
        for node in graph.findAllNodes(qualname, True):
            args = list(node.inputs())
            if shared is not None and shared < len(args) and args[shared].node().kind() == "prim::Constant" and \
                    not args[shared].toIValue():
                continue
            value = args[at] if at < len(args) else None
            if value is not None and value.node().kind() == "prim::Constant":
                sites.append((qualname, "const", value.toIValue()))
            elif value is not None and value in inputs:
                sites.append((qualname, "arg", inputs.index(value) - (1 if method else 0)))
            else:
                sites.append((qualname, "unknown", None))
    out = tuple(sites)
    _TORCH_SITES[key] = (owner, out)
    return out


def _torch_script_vet(vet: Any, fn: Any, method: bool, args: tuple, kw: dict) -> None:
    try:
        sites = _torch_script_sites(fn, method)
    except Exception:  # noqa: BLE001 - a graph this torch cannot show: refused only where it has a file op
        sites = (("torchscript", "unknown", None),)
    for qualname, kind, where in sites:
        label = f"torch.jit ({qualname} in {getattr(fn, 'qualified_name', None) or getattr(fn, 'name', '?')})"
        if kind == "const":
            _nv_path(vet, "torch", label, where)
        elif kind == "arg" and not kw and 0 <= where < len(args):
            _nv_path(vet, "torch", label, args[where])
        else:
            vet.refuse(f"a call to torch: {label} (a path that is not known before it runs)", None)


def _torch_script(c: types.ModuleType, vet: Any) -> None:
    """TorchScript functions and methods (their ops run in C++, no Python call each): vetted where they are called
    (`ScriptFunction.__call__`, `ScriptMethod.__call__`, `torch._C.fork` of one); a graph run directly
    (`_jit_interpret_graph`) with a file op is refused."""
    for tname, method in (("ScriptFunction", False), ("ScriptMethod", True)):
        t = c.__dict__.get(tname)
        if not isinstance(t, type) or "__call__" not in t.__dict__:
            continue

        def make(orig: Any, method: bool = method) -> Any:
            def call(self: Any, *args: Any, **kw: Any) -> Any:
                _torch_script_vet(vet, self, method, args, kw)
                return orig(self, *args, **kw)
            call.__name__ = call.__qualname__ = "__call__"
            return call
        replace_type_method(t, "__call__", make)
    fork = c.__dict__.get("fork")
    if callable(fork) and not getattr(fork, "__crane_vetted__", False):
        script = tuple(t for t in (c.__dict__.get("ScriptFunction"), c.__dict__.get("ScriptMethod"))
                       if isinstance(t, type))

        def forked(fn: Any, *args: Any, **kw: Any) -> Any:
            if isinstance(fn, script):
                _torch_script_vet(vet, fn, type(fn) is c.__dict__.get("ScriptMethod"), args, kw)
            return fork(fn, *args, **kw)
        forked.__crane_vetted__ = True  # type: ignore[attr-defined]
        _nv_replace_in(("torch._C", "torch.jit._async", "torch.jit"), fork, forked)
    interpret = c.__dict__.get("_jit_interpret_graph")
    if callable(interpret) and not getattr(interpret, "__crane_vetted__", False):
        def interpret_graph(graph: Any, *args: Any, **kw: Any) -> Any:
            if any(graph.findAllNodes(q, True) for q in _TORCH_FILE_OPS):
                vet.refuse("a call to torch: torch._C._jit_interpret_graph (a graph with a file op)", None)
            return interpret(graph, *args, **kw)
        interpret_graph.__crane_vetted__ = True  # type: ignore[attr-defined]
        c.__dict__["_jit_interpret_graph"] = interpret_graph


def _torch(mod: types.ModuleType, vet: Any) -> dict[str, Any]:
    """`torch` once it has executed (its `from_file` is the C function copied from `_VariableFunctions`)."""
    out: dict[str, Any] = {}
    c = sys.modules.get("torch._C")
    if type(c) is not types.ModuleType:
        return out
    _torch_operations(c, vet)
    _torch_script(c, vet)
    out.update({k: v for k, v in _nv_module_functions("torch", {
        "_save_jit_module": _nv_arg("torch", "torch._C._save_jit_module", 1, "arg1"),
        "_save_mobile_module": _nv_arg("torch", "torch._C._save_mobile_module", 1, "arg1"),
        "_save_parameters": _nv_arg("torch", "torch._C._save_parameters", 1, "arg1")}, {
        "PyTorchFileWriter": {"__init__": (_nv_arg("torch", "torch._C.PyTorchFileWriter", 0, "file_name"), False)},
        "ScriptModule": {"save": (_nv_arg("torch", "torch._C.ScriptModule.save", 0, "filename"), False),
                         "_save_for_mobile": (_nv_arg("torch", "torch._C.ScriptModule._save_for_mobile", 0,
                                                      "filename"), False)},
        "StorageBase": {"from_file": (_nv_arg("torch", "torch.UntypedStorage.from_file", 0, "filename",
                                              _shared(1)), True)}})(c, vet).items()})
    # round 12 (h7): the profiler's traces, written in C++ (Kineto's `_ProfilerResult.save`: a profile's
    # `export_chrome_trace`; the execution-trace observer's file, named when it is registered)
    ag = c.__dict__.get("_autograd")
    if type(ag) is types.ModuleType:
        _nv_module_functions("torch", {}, {"_ProfilerResult": {
            "save": (_nv_arg("torch", "torch._C._autograd._ProfilerResult.save", 0, "arg0"), False)}})(ag, vet)
    prof = c.__dict__.get("_profiler")
    et = prof.__dict__.get("_add_execution_trace_observer") if type(prof) is types.ModuleType else None
    if callable(et) and not getattr(et, "__crane_vetted__", False):
        label = "torch._C._profiler._add_execution_trace_observer"
        new_et = _nv_function(vet, "torch", label, et, _nv_arg("torch", label, 0, "output_file_path"))
        new_et.__crane_vetted__ = True  # type: ignore[attr-defined]
        _nv_replace_in(("torch._C._profiler", "torch.profiler.profiler"), et, new_et)
    vf = c.__dict__.get("_VariableFunctionsClass")
    if isinstance(vf, type) and "from_file" in vf.__dict__:
        orig = vf.__dict__["from_file"]
        inner = orig.__func__ if isinstance(orig, staticmethod) else orig
        replace_type_method(vf, "from_file", _nv_method(vet, "torch", "torch.from_file",
                                                        _nv_arg("torch", "torch.from_file", 0, "filename",
                                                                _shared(1)), True))
        new = vf.__dict__["from_file"]
        new = new.__func__ if isinstance(new, staticmethod) else new
        if new is not inner:
            _nv_replace_in(("torch",), inner, new)  # (`torch/__init__.py` copies `_VariableFunctions`' names)
    return {}  # (every replacement is made in place above)


# -- TensorFlow ----------------------------------------------------------------------------------------------------
# op -> ((index of a path input, how it is written: "file", "prefix" (files named after it), "tree" (a folder it
# fills)), ...), attributes naming a file
_TF_WRITE_OPS: dict[str, tuple[tuple[tuple[int, str], ...], tuple[str, ...]]] = {
    "WriteFile": (((0, "file"),), ()), "Save": (((0, "file"),), ()), "SaveSlices": (((0, "file"),), ()),
    "SaveV2": (((0, "prefix"),), ()), "MergeV2Checkpoints": (((0, "prefix"), (1, "prefix")), ()),
    "CreateSummaryFileWriter": (((1, "tree"),), ()), "CreateSummaryDbWriter": (((1, "file"),), ()),
    "SaveDataset": (((1, "tree"),), ()), "SaveDatasetV2": (((1, "tree"),), ()),
    "DatasetToTFRecord": (((1, "file"),), ()), "ExperimentalDatasetToTFRecord": (((1, "file"),), ()),
    "SnapshotDataset": (((1, "tree"),), ()), "SnapshotDatasetV2": (((1, "tree"),), ()),
    "ExperimentalSnapshotDataset": (((1, "tree"),), ()), "CacheDataset": (((1, "prefix"),), ()),
    "CacheDatasetV2": (((1, "prefix"),), ()), "PrintV2": ((), ("output_stream",)),
    "DebugIdentityV2": ((), ("dump_root",)), "DebugIdentity": ((), ("debug_urls",))}


def _tf_texts(value: Any) -> list | None:
    """The strings a path input holds (an eager tensor's values, a str, bytes, or a list of them), None where they
    cannot be told (a symbolic tensor)."""
    if isinstance(value, (str, bytes)):
        return [value]
    if isinstance(value, (list, tuple)):
        out: list = []
        for v in value[:10000]:
            got = _tf_texts(v)
            if got is None:
                return None
            out += got
        return out
    numpy = getattr(value, "numpy", None)
    if callable(numpy):
        try:
            got = numpy()
        except Exception:  # noqa: BLE001 - a symbolic tensor, or anything else that has no values now
            return None
        items = got.ravel().tolist() if hasattr(got, "ravel") else [got]
        return items if all(isinstance(v, (str, bytes)) for v in items) else None
    return None


def _tf_vet_op(vet: Any, op: str, inputs: Any, attrs: Any) -> None:
    """An eager op about to run: a file-writing op's path inputs (by their index among the inputs) and the values
    that follow its file-naming attributes' names (wherever they are: an input equal to a name is vetted too)."""
    paths, names = _TF_WRITE_OPS[op]
    label = f"tensorflow op {op}"
    for i, how in paths:
        texts = _tf_texts(inputs[i]) if i < len(inputs) else []
        if texts is None:
            vet.refuse(f"a call to tensorflow: {label} (a path that is not known before it runs)", None)
            return
        for text in texts:
            if text in ("", b""):
                continue  # (CacheDataset's "": in memory)
            if how == "prefix":
                _nv_prefix(vet, "tensorflow", label, text)
                continue
            text = os.fsdecode(_nv_path(vet, "tensorflow", label, text))
            if how == "tree":
                vet.prepare_tree(text[len("file://"):] if text.startswith("file://") else text)
    for k in range(len(attrs) - 1):
        if type(attrs[k]) is not str or attrs[k] not in names:
            continue
        value = attrs[k + 1]
        for text in _tf_texts(value) or [value]:
            t = os.fsdecode(text) if isinstance(text, (str, bytes)) else None
            if t is None:
                vet.refuse(f"a call to tensorflow: {label} ({attrs[k]} not a text)", None)
            elif attrs[k] != "output_stream" or t.startswith("file://"):
                _nv_path(vet, "tensorflow", label, t[len("file://"):] if t.startswith("file://") else t)


# -- TensorFlow graph functions (`tf.function`, a loaded SavedModel, a dataset's functions) -----------------------
# A graph function's ops run in C++ with no Python call each: the eager executor is called once, with the function's
# name as the op. So a function is read once (its FunctionDef from the context, and every function it calls) for its
# file-writing ops, each with where its path comes from: a constant of the graph (its text), one of the function's
# own inputs (the eager value it is called with), or anything else (not known before it runs: the run is refused).
# function name -> its write sites: (op, how ("file", "prefix", "tree"), source ("const", texts) | ("arg", index) |
# ("unknown", None)); () for a name that is no function or writes nothing (the cost of every later call: one lookup).
# The cache holds only while the context's function library is unchanged: every call that adds or removes a function
# (`TFE_ContextAddFunction*`, `TFE_ContextRemoveFunction`, ...) empties it (`_tf_library_changed`), so a name whose
# function is swapped for another (removed, and a new definition added under it) is read again
_TF_SITES: dict[str, tuple[tuple[str, str, tuple[str, Any]], ...]] = {}
_TF_UNKNOWN: tuple[str, Any] = ("unknown", None)


def _tf_fdef(name: str) -> Any:
    ctx = sys.modules.get("tensorflow.python.eager.context")
    try:
        context = ctx.context()  # type: ignore[union-attr]
        return context.get_function_def(name) if context.has_function(name) else None
    except Exception:  # noqa: BLE001 - no such function (a primitive op), or a context not made yet
        return None


def _tf_source(nodes: dict, args: dict, text: str, depth: int = 0) -> tuple[str, Any]:
    """Where a node input (`arg`, `node:output:i`) of a function body comes from."""
    name = text.split(":", 1)[0]
    if name in args:
        return ("arg", args[name])
    node = nodes.get(name)
    if node is None or depth > 50:
        return _TF_UNKNOWN
    if node.op == "Const":
        tensor = node.attr["value"].tensor
        return ("const", tuple(tensor.string_val)) if tensor.string_val else _TF_UNKNOWN
    if node.op in ("Identity", "Snapshot", "StopGradient") and node.input:
        return _tf_source(nodes, args, node.input[0], depth + 1)
    return _TF_UNKNOWN


def _tf_called(node: Any) -> list[tuple[str, bool]]:
    """The functions a node calls: (name, whether its data inputs are the callee's arguments in order)."""
    out: list[tuple[str, bool]] = []
    if _tf_fdef(node.op) is not None:
        out.append((node.op, True))
    for key, value in node.attr.items():
        if value.HasField("func") and value.func.name:
            out.append((value.func.name, key == "f" and node.op in ("PartitionedCall", "StatefulPartitionedCall")))
        for f in value.list.func:
            out.append((f.name, False))
    return out


def _tf_sites(name: str, busy: frozenset = frozenset()) -> tuple[tuple[str, str, tuple[str, Any]], ...]:
    """The write sites of function `name` (cached), with `("arg", i)` its own i-th input."""
    if name in _TF_SITES:
        return _TF_SITES[name]
    fdef = _tf_fdef(name)
    if fdef is None:
        _TF_SITES[name] = ()
        return ()
    if name in busy or len(busy) > 30:  # (a function that calls itself, or one read 31 calls deep: not read to the
        return (("a graph function not read", "file", _TF_UNKNOWN),)  # end, so not known before it runs: refused)
    busy = busy | {name}
    args = {a.name: i for i, a in enumerate(fdef.signature.input_arg)}
    nodes = {n.name: n for n in fdef.node_def}
    sites: list[tuple[str, str, tuple[str, Any]]] = []
    for node in fdef.node_def:
        data = [i for i in node.input if not i.startswith("^")]
        if node.op in _TF_WRITE_OPS:
            sites += _tf_write_sites(node, data, lambda name: _tf_source(nodes, args, name))
        for callee, positional in _tf_called(node):
            for op, how, (kind, where) in _tf_sites(callee, busy):
                if kind == "arg":  # (the callee's input: the caller's value for it where the call maps them in
                    # order, a call of it by name or a PartitionedCall; else, `If`'s branches, `While`'s body, not known)
                    source = _tf_source(nodes, args, data[where]) if positional and where < len(data) else _TF_UNKNOWN
                    sites.append((op, how, source))
                else:
                    sites.append((op, how, (kind, where)))
    out = tuple(sites)
    _TF_SITES[name] = out
    return out


def _tf_vet_function(vet: Any, name: str, inputs: Any) -> None:
    """A graph function about to run: its write sites' paths vetted (an input's eager value; a constant), or the run
    refused where a path is not known before it runs."""
    for op, how, (kind, where) in _tf_sites(name):
        label = f"tensorflow op {op} in the graph function {name}"
        if kind == "arg":
            texts = _tf_texts(inputs[where]) if where < len(inputs) else None
        else:
            texts = list(where) if kind == "const" else None
        if not _tf_vet_texts(vet, how, label, texts):
            return


def _tf_write_sites(node: Any, data: list, source: Callable[[str], Any]) -> list:
    """A write op's sites (`_TF_WRITE_OPS`): each path input as `source` finds its value (by the input's name), each
    path attribute a constant (an `output_stream`'s `file://` ones alone)."""
    paths, names = _TF_WRITE_OPS[node.op]
    sites = [(node.op, how, source(data[at]) if at < len(data) else _TF_UNKNOWN) for at, how in paths]
    for attr in names:
        if attr in node.attr:
            value = node.attr[attr]
            texts = tuple(value.list.s) or (value.s,)
            if attr == "output_stream":
                texts = tuple(t[len(b"file://"):] for t in texts if t.startswith(b"file://"))
            sites += [(node.op, "file", ("const", (t,))) for t in texts if t]
    return sites


def _tf_vet_texts(vet: Any, how: str, label: str, texts: list | None) -> bool:
    """The paths an op writes at (`how`: a file, a file-name `prefix`, a `tree`) vetted, each as the run's; the call
    refused where they are not known before it runs (`texts` None). False when refused."""
    if texts is None:
        vet.refuse(f"a call to tensorflow: {label} (a path that is not known before it runs)", None)
        return False
    for text in texts:
        if text in ("", b""):
            continue
        if how == "prefix":
            _nv_prefix(vet, "tensorflow", label, text)
            continue
        text = os.fsdecode(_nv_path(vet, "tensorflow", label, text))
        if how == "tree":
            vet.prepare_tree(text[len("file://"):] if text.startswith("file://") else text)
    return True


def _tf_attr_functions(vet: Any, op: str, attrs: Any) -> None:
    """An op given functions as attributes (a dataset's `map`, `While`, ...): their write sites vetted, with no
    input known (each runs on values made later)."""
    for value in attrs:  # (the fast path's inputs and attributes in one tuple: every value looked at)
        if type(value) in (int, float, bool, str, bytes) or value is None:
            continue
        for f in value[:16] if isinstance(value, (list, tuple)) else (value,):
            fname = getattr(f, "name", None)
            if isinstance(fname, bytes):
                fname = fname.decode("utf-8", "replace")
            if isinstance(fname, str) and _tf_sites(fname):
                _tf_vet_function(vet, fname, ())


def _tf_fast_path(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`TFE_Py_FastPathExecute(ctx, op_name, name, *inputs, *attr_name_value_pairs)`."""
    if len(args) > 1 and type(args[1]) is str:
        if args[1] in _TF_WRITE_OPS:
            _tf_vet_op(vet, args[1], args[3:], args[3:])  # (inputs first, by index; then attribute names and values)
        else:
            _tf_attr_functions(vet, args[1], args[3:])
    return args, kw


def _tf_execute(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`TFE_Py_Execute(ctx, device, op_name, inputs, attrs, ...)` (and `TFE_Py_ExecuteCancelable`): a write op's
    paths, or a graph function's (called by its name as the op)."""
    op = args[2] if len(args) > 4 else None
    if type(op) is bytes:  # (the eager fallbacks name the op in bytes: `_execute.execute(b"WriteFile", ...)`)
        op = op.decode("utf-8", "replace")
    if type(op) is str and op in _TF_WRITE_OPS:
        _tf_vet_op(vet, op, list(args[3] or ()), tuple(args[4] or ()))
    elif type(op) is str:
        if _tf_sites(op):
            _tf_vet_function(vet, op, list(args[3] or ()))
        _tf_attr_functions(vet, op, tuple(args[4] or ()))
    return args, kw


def _tf_library_changed(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """A call that changes the context's function library: every function's write sites read again on its next call
    (a name's cached sites, or its being no function, may no longer be true)."""
    _TF_SITES.clear()
    return args, kw


def _both_paths(family: str, label: str, at: tuple[int, ...]) -> Callable[[Any, tuple, dict], tuple[tuple, dict]]:
    return _nv_both(*(_nv_arg(family, label, i, f"arg{i}") for i in at))


_TF_FILE_IO = _nv_module_functions("tensorflow", {
    "DeleteFile": _nv_arg("tensorflow", "tf.io.gfile.remove", 0, "filename"),
    "DeleteRecursively": _nv_arg("tensorflow", "tf.io.gfile.rmtree", 0, "dirname"),
    "CreateDir": _nv_arg("tensorflow", "tf.io.gfile.mkdir", 0, "dirname"),
    "RecursivelyCreateDir": _nv_arg("tensorflow", "tf.io.gfile.makedirs", 0, "dirname"),
    "RenameFile": _both_paths("tensorflow", "tf.io.gfile.rename", (0, 1)),
    "CopyFile": _nv_arg("tensorflow", "tf.io.gfile.copy", 1, "newpath"),
    "WriteStringToFile": _nv_arg("tensorflow", "tf.io.write_file", 0, "filename")}, {
    "WritableFile": {"__init__": (_nv_arg("tensorflow", "tf.io.gfile.GFile", 0, "filename"), False)}})
_TF_RECORD_IO = _nv_module_functions("tensorflow", {}, {
    "RecordWriter": {"__init__": (_nv_arg("tensorflow", "tf.io.TFRecordWriter", 0, "path"), False)}})
# -- round 13 (h7): TensorFlow's other C++ entry points that write files, load code or open sockets ----------------
def _nv_refused(family: str, label: str, why: str) -> Callable[[Any, tuple, dict], tuple[tuple, dict]]:
    """The check of a call refused whatever its arguments (a native socket, native code loaded)."""
    def check(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
        vet.refuse(f"a call to {family}: {label} ({why})", None)
        return args, kw
    return check


def _nv_tree(family: str, label: str, at: int, key: str) -> Callable[[Any, tuple, dict], tuple[tuple, dict]]:
    """The check of a folder argument that the native code fills (its files made private first); a folder vetted
    once in this run is not walked again (a debugger dump root is named by every event written)."""
    def check(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
        value = args[at] if len(args) > at else kw.get(key)
        if value is None:
            return args, kw
        text = _nv_path(vet, family, label, value)
        done = vet.__dict__.setdefault("_nv_trees", set())
        if isinstance(text, (str, bytes)) and text not in done:
            plain = os.fsdecode(text)
            vet.prepare_tree(plain[len("file://"):] if plain.startswith("file://") else plain)
            done.add(text)
        if len(args) > at:
            return args[:at] + (text,) + args[at + 1:], kw
        return args, ({**kw, key: text} if key in kw else kw)
    return check


def _tf_events_suffix(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`EventsWriter.InitWithSuffix(suffix)`: the suffix is appended to the file's name (vetted prefix + time +
    host): a separator in it would name a file elsewhere."""
    value = _nv_text(args[0] if args else kw.get("arg0"))
    if isinstance(value, (str, bytes)) and (b"/" in os.fsencode(value) or b"\\" in os.fsencode(value)):
        vet.refuse(f"a call to tensorflow: EventsWriter.InitWithSuffix (a suffix naming another folder: "
                   f"{os.fsdecode(value)[:200]!r})", None)
    return args, kw



def _tfprof_options(at: int) -> Callable[[Any, tuple, dict], tuple[tuple, dict]]:
    """tfprof's serialized `OptionsProto` (argument `at`): its `output` (`file:outfile=<path>`, `timeline:...`,
    `pprof:...`) names a file the C++ writes: vetted; options that cannot be read are refused."""
    def check(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
        raw = args[at] if len(args) > at else kw.get(f"arg{at}")
        if raw is None:
            return args, kw
        raw = _nv_text(raw)
        try:
            # (loaded by TensorFlow's profiler module that calls the C++: never imported here, where the worker
            # imports nothing of the kernel's libraries; absent, the options cannot be read: refused)
            opts = sys.modules["tensorflow.core.profiler.tfprof_options_pb2"].OptionsProto()
            opts.ParseFromString(os.fsencode(raw) if isinstance(raw, str) else raw)
            output = str(opts.output)
        except Exception:  # noqa: BLE001 - options this cannot read: not known before it runs
            vet.refuse("a call to tensorflow: tfprof (options that cannot be read)", None)
            return args, kw
        kind, _, rest = output.partition(":")
        for item in rest.split(",") if kind in ("file", "timeline", "pprof") else ():
            key, _, value = item.partition("=")
            if key.strip() == "outfile" and value:
                _nv_path(vet, "tensorflow", f"tfprof {kind} output", value)
        args = args[:at] + (raw,) + args[at + 1:] if len(args) > at else args
        return args, kw
    return check


_TF_OUT_ARGS = ("out_function_object", "out_metadata_object", "out_header", "out_session_module",
                "out_constant_buffers_object")


def _tfcompile(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`_pywrap_tfcompile.Compile(...)`: its `out_*` keywords are the files it writes; positional arguments are
    refused (which one is a path cannot be told)."""
    if args:
        vet.refuse("a call to tensorflow: tfcompile Compile (positional arguments)", None)
    for key in _TF_OUT_ARGS:
        if kw.get(key):
            kw = {**kw, key: _nv_path(vet, "tensorflow", f"tfcompile Compile {key}", kw[key])}
    return args, kw


_TF_SOCKET = "a native socket: it listens or connects in C++"
_TF_DEBUG_EVENTS = _nv_module_functions("tensorflow", {
    name: _nv_tree("tensorflow", f"tf debug events writer {name}", 0, "arg0") for name in (
        "Init", "WriteSourceFile", "WriteStackFrameWithId", "WriteGraphOpCreation", "WriteDebuggedGraph",
        "WriteExecution", "WriteGraphExecutionTrace", "RegisterDeviceAndGetId", "FlushNonExecutionFiles",
        "FlushExecutionFiles", "Close")})
_TF_EVENTS = _nv_module_functions("tensorflow", {}, {
    "EventsWriter": {"__init__": (_nv_arg("tensorflow", "tf EventsWriter", 0, "arg0", prefix=True), False),
                     "InitWithSuffix": (_tf_events_suffix, False)}})
_TF_PROFILER = _nv_module_functions("tensorflow", {
    "start_server": _nv_refused("tensorflow", "profiler start_server", _TF_SOCKET)}, {
    "ProfilerSession": {"start": (_nv_tree("tensorflow", "profiler ProfilerSession.start", 0, "arg0"), False)}})
_TF_PROFILER_PLUGIN = _nv_module_functions("tensorflow", {
    "trace": _nv_refused("tensorflow", "profiler trace", _TF_SOCKET),
    "monitor": _nv_refused("tensorflow", "profiler monitor", _TF_SOCKET)})
_TF_MLIR = _nv_module_functions("tensorflow", {
    "ExperimentalWriteBytecode": _nv_arg("tensorflow", "tf mlir ExperimentalWriteBytecode", 0, "arg0")})
_TF_TFPROF = _nv_module_functions("tensorflow", {
    "WriteProfile": _nv_arg("tensorflow", "tfprof WriteProfile", 0, "arg0"),
    "PrintModelAnalysis": _tfprof_options(4), "Profile": _tfprof_options(1)})
_TF_COMPILE = _nv_module_functions("tensorflow", {"Compile": _tfcompile})
# -- round 13 (h7): a graph run by a `tf.compat.v1.Session` (graph mode): its ops run in C++ with no eager call ---
# session (by id, the object kept) -> (the session, its graph), recorded when the session is made
_TF_SESSIONS: dict[int, tuple[Any, Any]] = {}


def _tf_graph_sites(graph: Any) -> list[tuple[str, str, tuple[str, Any]]]:
    """The write ops of a session's graph (its GraphDef, read through the C API: ops added any way are in it), each
    with its path's source: a constant ("const", texts), a placeholder the run may feed ("feed", (its name, the
    source of its default or None)), or not known before it runs; a function of the graph's library that holds a
    write op counts as one whose path is not known."""
    gdef = graph.as_graph_def()
    nodes = {n.name: n for n in gdef.node}

    def source(text: str, depth: int = 0) -> tuple[str, Any]:
        name = text.split(":", 1)[0].lstrip("^")
        node = nodes.get(name)
        if node is None or depth > 50:
            return _TF_UNKNOWN
        if node.op == "Placeholder":
            return ("feed", (name, None))
        if node.op == "PlaceholderWithDefault" and node.input:
            return ("feed", (name, source(node.input[0], depth + 1)))
        if node.op in ("Identity", "Snapshot", "StopGradient") and node.input:
            return source(node.input[0], depth + 1)
        return _tf_source(nodes, {}, text, depth)

    sites: list[tuple[str, str, tuple[str, Any]]] = []
    for node in gdef.node:
        if node.op in _TF_WRITE_OPS:
            sites += _tf_write_sites(node, [i for i in node.input if not i.startswith("^")], source)
    for fdef in gdef.library.function:
        if any(n.op in _TF_WRITE_OPS for n in fdef.node_def):
            sites.append((f"a function of the graph ({fdef.signature.name})", "file", _TF_UNKNOWN))
    return sites


def _tf_feeds(feeds: Any) -> dict[str, Any]:
    """A run's feeds by the fed operation's name (`{TF_Output: value}`, as `Session.run` hands them)."""
    c = sys.modules.get("tensorflow.python.client._pywrap_tf_session")
    out: dict[str, Any] = {}
    if type(feeds) is not dict or c is None:
        return out
    name_of: Any = c.__dict__.get("TF_OperationName")
    if not callable(name_of):
        return out
    for key, value in feeds.items():
        try:
            out[str(name_of(key.oper))] = value
        except Exception:  # noqa: BLE001 - a feed this cannot name: its placeholder counts as not fed
            continue
    return out


def _tf_session_graph(vet: Any, session: Any) -> Any:
    got = _TF_SESSIONS.get(id(session))
    if got is None or got[0] is not session:
        vet.refuse("a call to tensorflow: a session run (a session whose graph is not known)", None)
        return None
    return got[1]


def _tf_vet_graph(vet: Any, graph: Any, feeds: dict[str, Any], label: str) -> None:
    """The write ops of a graph a session is about to run: each path vetted (a constant, or the run's feed of its
    placeholder, else the placeholder's default), any other path refused."""
    for op, how, (kind, where) in _tf_graph_sites(graph):
        while kind == "feed":
            name, default = where
            if name in feeds:
                kind, where = "const", _tf_texts(feeds[name]) if not hasattr(feeds[name], "ravel") \
                    else feeds[name].ravel().tolist()
                break
            kind, where = default if default is not None else _TF_UNKNOWN
        what = f"tensorflow op {op} in {label}"
        texts = list(where) if kind == "const" and where is not None else None
        if texts is not None and not all(isinstance(t, (str, bytes)) for t in texts):
            texts = None
        if not _tf_vet_texts(vet, how, what, texts):
            return


def _tf_session_maker(mod: types.ModuleType, vet: Any) -> dict[str, Any]:
    """`_pywrap_tf_session`: sessions recorded with their graph when made; every run of one (`TF_SessionRun_wrapper`,
    a partial run's setup, a callable made) has the graph's write ops vetted first; native code loading and
    servers refused."""
    out = _TF_SESSION_REFUSED(mod, vet)
    d = mod.__dict__
    for name in ("TF_NewSessionRef", "TF_NewSession"):
        orig = d.get(name)
        if callable(orig) and not getattr(orig, "__crane_vetted__", False):
            def new_session(*args: Any, _orig: Any = orig, **kw: Any) -> Any:
                session = _orig(*args, **kw)
                graph = args[0] if args else kw.get("arg0")
                _TF_SESSIONS[id(session)] = (session, graph)
                return session
            new_session.__name__ = name
            new_session.__crane_vetted__ = True  # type: ignore[attr-defined]
            _nv_replace_in((mod.__name__,), orig, new_session)
            out[name] = new_session
    runs = {"TF_SessionRun_wrapper": 2, "TF_SessionPRunSetup_wrapper": None, "TF_SessionMakeCallable": None}
    for name, feeds_at in runs.items():
        orig = d.get(name)
        if callable(orig) and not getattr(orig, "__crane_vetted__", False):
            def run(*args: Any, _orig: Any = orig, _at: int | None = feeds_at, _name: str = name, **kw: Any) -> Any:
                graph = _tf_session_graph(vet, args[0] if args else kw.get("arg0"))
                if graph is not None:
                    feeds = _tf_feeds(args[_at]) if _at is not None and len(args) > _at else {}
                    _tf_vet_graph(vet, graph, feeds, f"a session's graph ({_name})")
                return _orig(*args, **kw)
            run.__name__ = name
            run.__crane_vetted__ = True  # type: ignore[attr-defined]
            _nv_replace_in((mod.__name__,), orig, run)
            out[name] = run
    return out


def _tf_load_library(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`TF_LoadLibrary`: an op library an installed package ships (TensorFlow's import loads its own plugins this
    way) is loaded; any other file, the notebook's or one the cell wrote, is native code loaded into the process:
    refused."""
    key = next((k for k in ("arg0", "library_filename") if k in kw), None)
    value = _nv_text(args[0] if args else kw.get(key) if key else None)  # (the plain text vetted is handed on)
    try:
        path = os.fsdecode(value) if isinstance(value, (str, bytes)) else ""
    except (TypeError, ValueError):
        path = ""
    if not (path and os.path.isabs(path) and is_library(path)):
        vet.refuse("a call to tensorflow: tf.load_op_library (native code loaded into the process)", None)
    if args:
        return (value, *args[1:]), kw
    return args, {**kw, key: value} if key else kw


_TF_SESSION_REFUSED = _nv_module_functions("tensorflow", {
    "TF_LoadLibrary": _tf_load_library,
    "TF_LoadPluggableDeviceLibrary": _nv_refused("tensorflow", "tf.load_pluggable_device_library",
                                                 "native code loaded into the process"),
    "TF_NewServer": _nv_refused("tensorflow", "tf.distribute.Server", _TF_SOCKET)})
_TF_DATA_SERVICE = _nv_module_functions("tensorflow", {
    name: _nv_refused("tensorflow", f"tf.data service {name}", _TF_SOCKET) for name in (
        "TF_DATA_NewDispatchServer", "TF_DATA_NewWorkerServer")})
_TF_REMOTE = {name: _nv_refused("tensorflow", f"eager context {name}", _TF_SOCKET) for name in (
    "TFE_ContextSetServerDef", "TFE_ContextSetServerDefWithTimeoutAndRetries", "TFE_ContextUpdateServerDef",
    "TFE_EnableCollectiveOps")}


_TF_EAGER = _nv_module_functions("tensorflow", {
    "TFE_Py_FastPathExecute": _tf_fast_path, "TFE_Py_Execute": _tf_execute,
    "TFE_Py_ExecuteCancelable": _tf_execute, **_TF_REMOTE, **{name: _tf_library_changed for name in (
        "TFE_ContextAddFunction", "TFE_ContextAddFunctionDef", "TFE_ContextAddFunctionDefNoSerialization",
        "TFE_ContextRemoveFunction", "TFE_ContextClearCaches")}})


# -- round 13 (h7): scipy's Matrix Market writer (`scipy.io.mmwrite`: fast_matrix_market opens its file in C++) --
_SCIPY_FMM = _nv_module_functions("scipy", {
    "open_write_file": _nv_arg("scipy", "scipy.io.mmwrite (fast_matrix_market open_write_file)", 0, "path")})


# -- round 16 (F8): Hugging Face's Rust writers --------------------------------------------------------------------
# tokenizers' `Tokenizer.save(path)` and `Model.save(folder, prefix)` (BPE, WordPiece, WordLevel, Unigram: the files
# below, `prefix-` before each) write in Rust (no Python `open`: no audit event), and so does safetensors'
# `serialize_file` (`safetensors.torch.save_file`, transformers' `save_pretrained` of a model's weights; a fast
# tokenizer's `save_pretrained` is `Tokenizer.save`). `Tokenizer.to_str`, `from_file`, `train` only read;
# `from_pretrained` downloads through huggingface_hub's Python code (audited).
_TOK_MODEL_FILES = ("vocab.json", "merges.txt", "vocab.txt", "unigram.json")


def _tok_model_save(vet: Any, args: tuple, kw: dict) -> tuple[tuple, dict]:
    """`Model.save(folder, prefix=None)`: the folder vetted, and every file a model writes there (named after the
    prefix) made ready first: those of `_TOK_MODEL_FILES`, and any other already there named `prefix-...`."""
    label = "tokenizers.models.Model.save"
    folder = _nv_path(vet, "tokenizers", label, args[0] if args else kw.get("folder"))
    prefix = _nv_text(args[1] if len(args) > 1 else kw.get("prefix"))
    if not isinstance(folder, (str, bytes)) or not (prefix is None or isinstance(prefix, str)):
        return args, kw  # (refused by the Rust signature)
    where = os.fsdecode(folder)
    names = [f"{prefix}-{n}" if prefix else n for n in _TOK_MODEL_FILES]
    if prefix:
        if "/" in prefix or "\\" in prefix:
            vet.refuse(f"a call to tokenizers: {label} (a prefix naming another folder: {prefix[:200]!r})", None)
        try:
            names += [n for n in os.listdir(where or ".") if n.startswith(prefix + "-") and n not in names]
        except OSError:
            pass
    for n in names:
        _nv_path(vet, "tokenizers", label, os.path.join(where, n))
    args = (folder,) + args[1:] if args else args
    return args, (kw if args else {**kw, "folder": folder})


def _tokenizers(mod: types.ModuleType, vet: Any) -> dict[str, Any]:
    """tokenizers' Rust module (`tokenizers.tokenizers`): `Tokenizer.save` and `models.Model.save` (which every model
    inherits) replaced in their types' own dicts (any route to the method meets them: `BaseTokenizer.save`,
    `save_model`, transformers' `save_pretrained`)."""
    tokenizer, models = mod.__dict__.get("Tokenizer"), mod.__dict__.get("models")
    if isinstance(tokenizer, type):
        replace_type_method(tokenizer, "save", _nv_method(vet, "tokenizers", "tokenizers.Tokenizer.save",
                                                          _nv_arg("tokenizers", "tokenizers.Tokenizer.save", 0,
                                                                  "path")))
    model = getattr(models, "Model", None) if isinstance(models, types.ModuleType) else None
    if isinstance(model, type):
        replace_type_method(model, "save", _nv_method(vet, "tokenizers", "tokenizers.models.Model.save",
                                                      _tok_model_save))
    return {}


_SAFETENSORS = _nv_module_functions("safetensors", {
    "serialize_file": _nv_arg("safetensors", "safetensors.serialize_file", 1, "filename")})


# extension module -> (its maker, the Python modules that re-export its names): merged into arrow.py's targets
NATIVE_TARGETS: dict[str, tuple[Callable[[types.ModuleType, Any], dict[str, Any]], tuple[str, ...]]] = {
    "h5py.h5f": (_H5F, ()), "h5py.h5p": (_H5P, ()),
    "torch": (_torch, ()),
    "tensorflow.python.lib.io._pywrap_file_io": (_TF_FILE_IO, ()),
    "tensorflow.python.lib.io._pywrap_record_io": (_TF_RECORD_IO, ()),
    "tensorflow.python._pywrap_tfe": (_TF_EAGER, ("tensorflow.python.pywrap_tfe",)),
    "tensorflow.python.client._pywrap_debug_events_writer": (_TF_DEBUG_EVENTS, ()),
    "tensorflow.python.client._pywrap_events_writer": (_TF_EVENTS, ()),
    "tensorflow.python.profiler.internal._pywrap_profiler": (_TF_PROFILER, ()),
    "tensorflow.python.profiler.internal._pywrap_profiler_plugin": (_TF_PROFILER_PLUGIN, ()),
    "tensorflow.python._pywrap_mlir": (_TF_MLIR, ("tensorflow.python.pywrap_mlir",)),
    "tensorflow.python.util._pywrap_tfprof": (_TF_TFPROF, ()),
    "tensorflow.python._pywrap_tfcompile": (_TF_COMPILE, ()),
    "tensorflow.python.client._pywrap_tf_session": (_tf_session_maker,
                                                    ("tensorflow.python.client.pywrap_tf_session",)),
    "tensorflow.python.data.experimental.service._pywrap_server_lib": (_TF_DATA_SERVICE, ()),
    "scipy.io._fast_matrix_market._fmm_core": (_SCIPY_FMM, ()),
    "tokenizers.tokenizers": (_tokenizers, ()),
    "safetensors._safetensors_rust": (_SAFETENSORS, tuple(f"safetensors{s}" for s in (
        "", ".torch", ".numpy", ".tensorflow", ".flax", ".paddle", ".mlx"))),
}

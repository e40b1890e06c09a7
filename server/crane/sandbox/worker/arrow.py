"""Portable sandbox, worker side: pyarrow's native entry points that open, create, move or delete files by path,
vetted like the guard table's writers (`--sandbox guard` has no OS layer under them; under Landlock they give a
precise refusal instead of a PermissionError, and honest writes over the view's links go to the run's copies).

pyarrow opens files in C++ (no audit event) from Cython callables that no call hook sees with their arguments, so
the callables themselves are replaced in pyarrow's modules (the Cython module and the modules that re-export it),
before the cell runs where pyarrow is loaded, else right after the cell's import loads them (`_ArrowAfterImport`, on
`sys.meta_path`) and before anything imports names from them:
- `pyarrow.lib`: `OSFile` (a writing mode), `output_stream`, `CompressedOutputStream`, `memory_map` (a writing
  mode), `create_memory_map`: subclasses or functions that vet the path, then call the original;
- `pyarrow._fs`: `LocalFileSystem` (its `open_output_stream`, `open_append_stream`, `create_dir`, `delete_dir`,
  `delete_dir_contents`, `delete_file`, `move`, `copy_file`; pyarrow's own Python writers build theirs from this
  name: `pq.ParquetWriter`, `pq.write_table`, `ds.write_dataset`), and `SubTreeFileSystem` over a local folder
  outside the run (refused: its calls go to C++ directly);
- `pyarrow._csv`: `CSVWriter` (a path sink).
A path in the cell's working folder or the run's scratch is made ready (its private copy, `prepare`) and the call
goes on; any other path is refused (`refuse`: the run is `blocked`, naming the call and the path).
- `pyarrow.fs.FileSystem` (in `pyarrow.fs` only): its `from_uri` hands back this module's `LocalFileSystem` for a
  local URI (pyarrow makes that one in C++, of its own class; the guard refuses that class's writers to user code:
  worker/guard.py `_C_METHODS`).
What stays out of reach of this layer (docs/sandbox.md): a file system of pyarrow's own class reached another way
(`pyarrow._fs.FileSystem.from_uri`, a dataset's `filesystem`) called directly, and the originals, reachable through
the replacements' `__mro__` or closures: the guard alone is no wall against code written to escape it; Linux's
Landlock layer is.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import Any

from crane.sandbox.worker.after_import import AfterImport  # kernel: strip
from crane.sandbox.worker.guard import _HandedMeta  # kernel: strip

_ARROW_WRITE_MODES = ("w", "a", "+", "x")


class _ArrowVet:
    """The run's decisions: `inside(path)` (the working folder), `prepare(path)` (its private copy made ready),
    `refuse(what, path)` (ends the run: blocked), `scratch` (the run's temporary folder)."""

    def __init__(self, inside: Callable[[Any], bool], prepare: Callable[[Any], object],
                 refuse: Callable[[str, Any], object], scratch: str) -> None:
        self.inside, self.prepare, self.refuse, self.scratch = inside, prepare, refuse, scratch

    def path(self, label: str, path: Any) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # a file object, a buffer: vetted where it was made
        try:
            text = os.fsdecode(os.fspath(path))
        except (TypeError, ValueError):
            return
        if text.startswith("file://"):
            text = text[len("file://"):]
        real = os.path.realpath(text)
        scratch = self.scratch.rstrip(os.sep) + os.sep
        if real == self.scratch or real.startswith(scratch):
            return
        if self.inside(text):
            self.prepare(text)
            return
        self.refuse(f"a call to pyarrow: {label} (writing {text[:200]!r} outside the cell's working folder)", text)


def _new_of(base: Any) -> Any:
    return base.__new__


def _subclass(base: Any, ns: dict[str, Any], meta: Any = None) -> Any:
    """A Python subclass of a Cython class, with the class's C method table (`__pyx_vtable__`, looked up in the
    type's own dict when the object is handed to Cython code)."""
    ns = {"__module__": base.__module__, "__doc__": base.__doc__, **ns}
    for klass in base.__mro__:
        vtable = klass.__dict__.get("__pyx_vtable__")
        if vtable is not None:
            ns["__pyx_vtable__"] = vtable
            break
    return (meta or type(base))(base.__name__, (base,), ns)


def _arrow_writes(mode: Any) -> bool:
    return isinstance(mode, str) and any(c in mode for c in _ARROW_WRITE_MODES)


def _arrow_lib(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
    d = mod.__dict__
    out: dict[str, Any] = {}
    os_file, output_stream = d.get("OSFile"), d.get("output_stream")
    compressed, memory_map, create_memory_map = d.get("CompressedOutputStream"), d.get("memory_map"), d.get(
        "create_memory_map")
    if isinstance(os_file, type):
        def new_os_file(cls: type, path: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
            if _arrow_writes(mode):
                vet.path("pyarrow.OSFile", path)
            return _new_of(os_file)(cls, path, mode, *args, **kw)
        out["OSFile"] = _subclass(os_file, {"__new__": new_os_file})
    if isinstance(compressed, type):
        def new_compressed(cls: type, stream: Any, *args: Any, **kw: Any) -> Any:
            vet.path("pyarrow.CompressedOutputStream", stream)
            return _new_of(compressed)(cls, stream, *args, **kw)
        out["CompressedOutputStream"] = _subclass(compressed, {"__new__": new_compressed})
    if callable(output_stream):
        def output_stream_vetted(source: Any, *args: Any, **kw: Any) -> Any:
            vet.path("pyarrow.output_stream", source)
            return output_stream(source, *args, **kw)
        out["output_stream"] = output_stream_vetted
    if callable(memory_map):
        def memory_map_vetted(path: Any, mode: str = "r") -> Any:
            if _arrow_writes(mode):
                vet.path("pyarrow.memory_map", path)
            return memory_map(path, mode)
        out["memory_map"] = memory_map_vetted
    if callable(create_memory_map):
        def create_memory_map_vetted(path: Any, size: Any) -> Any:
            vet.path("pyarrow.create_memory_map", path)
            return create_memory_map(path, size)
        out["create_memory_map"] = create_memory_map_vetted
    return out


_ARROW_FS_WRITERS = {  # method -> the positional indexes of its path arguments (after self)
    "open_output_stream": (0,), "open_append_stream": (0,), "create_dir": (0,), "delete_dir": (0,),
    "delete_dir_contents": (0,), "delete_file": (0,), "move": (0, 1), "copy_file": (1,)}


def _arrow_fs(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
    d = mod.__dict__
    out: dict[str, Any] = {}
    local, subtree = d.get("LocalFileSystem"), d.get("SubTreeFileSystem")
    if isinstance(local, type):
        ns: dict[str, Any] = {}
        for name, where in _ARROW_FS_WRITERS.items():
            orig = local.__dict__.get(name) or getattr(local, name, None)
            if orig is None:
                continue

            def method(self: Any, *args: Any, _orig: Any = orig, _where: tuple = where, _name: str = name,
                       **kw: Any) -> Any:
                for i in _where:
                    if i < len(args):
                        vet.path(f"pyarrow.fs.LocalFileSystem.{_name}", args[i])
                for key in ("path", "src", "dest"):
                    if key in kw:
                        vet.path(f"pyarrow.fs.LocalFileSystem.{_name}", kw[key])
                return _orig(self, *args, **kw)
            ns[name] = method
        out["LocalFileSystem"] = _subclass(local, ns)
    base = d.get("FileSystem")
    vetted_local = out.get("LocalFileSystem")
    from_uri: Any = getattr(base, "from_uri", None)
    if isinstance(base, type) and isinstance(local, type) and vetted_local is not None and callable(from_uri):
        plain: type = local

        def from_uri_vetted(uri: Any) -> Any:
            fs, path = from_uri(uri)
            return _vetted_fs(fs, plain, vetted_local), path
        # pyarrow makes a `file://` URI's file system in C++, of its own class (whose writers no hook sees): the
        # one handed back is this module's `LocalFileSystem` (its writers vetted by path); objects pyarrow made
        # stay instances of `pyarrow.fs.FileSystem` (round 7)
        out["FileSystem"] = _subclass(base, {"__qualname__": base.__qualname__, "__crane_base__": base,
                                             "from_uri": staticmethod(from_uri_vetted)}, _HandedMeta)
    if isinstance(subtree, type) and isinstance(local, type):
        def new_subtree(cls: type, base_path: Any, base_fs: Any, *args: Any, **kw: Any) -> Any:
            if isinstance(base_fs, local):
                vet.path("pyarrow.fs.SubTreeFileSystem over a local folder", base_path)
            return _new_of(subtree)(cls, base_path, base_fs, *args, **kw)
        out["SubTreeFileSystem"] = _subclass(subtree, {"__new__": new_subtree})
    return out


def _vetted_fs(fs: Any, local: type, vetted: type) -> Any:
    """A local file system of pyarrow's own class, made again of the vetted class (the same options)."""
    if type(fs) is not local:
        return fs
    try:
        return vetted(use_mmap=bool(getattr(fs, "use_mmap", False)))
    except TypeError:
        return vetted()


def _arrow_csv(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
    writer = mod.__dict__.get("CSVWriter")
    if not isinstance(writer, type):
        return {}

    def new_writer(cls: type, sink: Any, *args: Any, **kw: Any) -> Any:
        vet.path("pyarrow.csv.CSVWriter", sink)
        return _new_of(writer)(cls, sink, *args, **kw)
    return {"CSVWriter": _subclass(writer, {"__new__": new_writer})}


# Cython module -> (its replacements' maker, the Python modules that re-export its names)
_ARROW_TARGETS: dict[str, tuple[Callable[[types.ModuleType, _ArrowVet], dict[str, Any]], tuple[str, ...]]] = {
    "pyarrow.lib": (_arrow_lib, ("pyarrow",)), "pyarrow._fs": (_arrow_fs, ("pyarrow.fs",)),
    "pyarrow._csv": (_arrow_csv, ("pyarrow.csv",))}
_ARROW_DONE: dict[str, dict[str, Any]] = {}
_ARROW_ORIGINALS: dict[str, dict[str, Any]] = {}
_REEXPORTED_ONLY = frozenset(("FileSystem",))


def _arrow_patch(name: str, vet: _ArrowVet) -> None:
    mod = sys.modules.get(name)
    if name in _ARROW_DONE or type(mod) is not types.ModuleType:
        return
    make, users = _ARROW_TARGETS[name]
    try:
        new = make(mod, vet)
    except Exception:  # noqa: BLE001 - a pyarrow this does not know: its writers stay as they are (Landlock holds)
        new = {}
    _ARROW_DONE[name] = new
    _ARROW_ORIGINALS[name] = {attr: mod.__dict__.get(attr) for attr in new}
    for modname in users:  # the modules that re-export its names (those already loaded)
        _reexport(name, modname)
    # (`FileSystem` stays pyarrow's own in the Cython module: pyarrow's other Cython modules import their argument
    # types from it when they load, and a file system pyarrow made must still pass for one)
    mod.__dict__.update({k: v for k, v in new.items() if k not in _REEXPORTED_ONLY})


def _reexport(name: str, modname: str) -> None:
    """The replacements of Cython module `name` put in `modname`, which re-exports its names."""
    m, origs = sys.modules.get(modname), _ARROW_ORIGINALS.get(name, {})
    if type(m) is types.ModuleType:
        for attr, value in _ARROW_DONE.get(name, {}).items():
            if m.__dict__.get(attr) is origs.get(attr):
                m.__dict__[attr] = value


_REEXPORTERS = {user: name for name, (_, users) in _ARROW_TARGETS.items() for user in users}


class _ArrowAfterImport(AfterImport):
    """When a target module is imported, its replacements are put in right after it is executed (before
    `pyarrow/__init__.py` or `pyarrow/fs.py` import names from it)."""

    def __init__(self, vet: _ArrowVet) -> None:
        self.vet = vet

    def wants(self, name: str) -> bool:
        return name in _ARROW_TARGETS and name not in _ARROW_DONE or name in _REEXPORTERS

    def after(self, name: str, module: types.ModuleType) -> None:
        if name in _REEXPORTERS:  # (a re-exporting module loaded after its Cython module was done)
            _reexport(_REEXPORTERS[name], name)
        else:
            _arrow_patch(name, self.vet)


def guard_arrow(inside: Callable[[Any], bool], prepare: Callable[[Any], object],
                refuse: Callable[[str, Any], object], scratch: str) -> list[str]:
    """Replace pyarrow's path-taking native writers now (those loaded) and when the cell loads them; returns the
    modules already done."""
    vet = _ArrowVet(inside, prepare, refuse, scratch)
    for name in _ARROW_TARGETS:
        _arrow_patch(name, vet)
    if not any(isinstance(f, _ArrowAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _ArrowAfterImport(vet))
    return sorted(n for n in _ARROW_DONE if _ARROW_DONE[n])

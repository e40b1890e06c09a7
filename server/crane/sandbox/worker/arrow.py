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
Round 8: pyarrow's `FileSystem` class itself has its writers and readers vetted (`_arrow_fs_type`: every file system
pyarrow makes, reached any way, through its sub-trees to the local path), `MemoryMappedFile._open`/`create` on their
mode, and the path funnels (`pyarrow.lib.encode_file_path`, `pyarrow.util._stringify_path`, polars'
`normalize_filepath`) announce every path read natively to the audit layer (`_announce_read`: the kernel's
connection file, Jupyter's runtime folders).
Round 9: the originals too, however they are reached (`__mro__[1]`, `pyarrow.lib`, an instance's class): the original
`OSFile` class itself vets its writing modes (guard.replace_type_new: the class every pyarrow path sink opens its file
through: `CompressedOutputStream`, `CSVWriter`, the IPC and Feather writers, `output_stream`); the Cython writers that
open their path in C++ themselves are vetted in their modules (`pyarrow._parquet`/`pyarrow._orc`'s `_stringify_path`,
`pyarrow._fs._copy_files*`, `pyarrow._dataset._filesystemdataset_write` through its file system); polars' own Rust
classes' writers and sinks (`PyDataFrame.write_json`, `PyLazyFrame.sink_csv`, ...) in the classes. The guard alone
is still no wall against code written to escape it (docs/sandbox.md); Linux's Landlock layer is.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import Any

from crane.sandbox.worker.after_import import AfterImport  # kernel: strip
from crane.sandbox.worker.guard import (  # kernel: strip
    _NOT_NATIVE_FS,
    _URL,
    FILE_SYSTEM_PATHS,
    _as_given,
    _HandedMeta,
    _through_file_system,
    replace_type_method,
    replace_type_new,
)
from crane.sandbox.worker.native import NATIVE_TARGETS, _nv_text  # kernel: strip

_ARROW_WRITE_MODES = ("w", "a", "+", "x")


class _ArrowVet:
    """The run's decisions: `inside(path)` (the working folder), `prepare(path)` (its private copy made ready),
    `refuse(what, path)` (ends the run: blocked), `scratch` (the run's temporary folder)."""

    def __init__(self, inside: Callable[[Any], bool], prepare: Callable[[Any], object],
                 refuse: Callable[[str, Any], object], scratch: str,
                 prepare_tree: Callable[[Any], object] | None = None,
                 translate: Callable[[Any], str | None] | None = None) -> None:
        self.inside, self.prepare, self.refuse, self.scratch = inside, prepare, refuse, scratch
        self.prepare_tree = prepare_tree or prepare  # a folder a writer fills: made private whole
        # a path into the REAL working folder: its run-folder counterpart (worker/abs_paths.py), else None
        self.translate: Callable[[Any], str | None] = translate or (lambda p: None)

    def through(self, label: str, fs: Any, path: Any, tree: bool = False) -> None:
        """A write of `path` in pyarrow file system `fs` (a native writer's destination): vetted where it leads."""
        kind, local = _through_file_system(fs, _nv_text(path))
        if kind in _NOT_NATIVE_FS:
            return  # in memory, or a Python handler whose own opens the audit hook sees
        if kind not in ("local", "") or local is None:
            self.refuse(f"a call to pyarrow: {label} (writing through a {kind!r} file system)", None)
            return
        self.path(label, local)
        if tree:
            self.prepare_tree(_nv_text(local))

    def path(self, label: str, path: Any, family: str = "pyarrow", rewrite: bool = False) -> Any:
        """`path` vetted as a native writer's destination; returns what the writer is to be handed: `path`, or
        (`rewrite`: the caller hands the writer what this returns) its run-folder counterpart where it names the
        real working folder (a path the kernel computed: worker/abs_paths.py), which is refused otherwise."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            return path  # a file object, a buffer: vetted where it was made
        try:
            text = os.fsdecode(os.fspath(path))
        except (TypeError, ValueError):
            return path
        url = text.startswith("file://")  # (a URL into the real folder stays refused: it is handed on as it is)
        if url:
            text = text[len("file://"):]
        real = os.path.realpath(text)
        scratch = self.scratch.rstrip(os.sep) + os.sep
        if real == self.scratch or real.startswith(scratch):
            return path
        moved = self.translate(text) if rewrite and not url else None
        if moved is not None:
            text, path = moved, _as_given(path, moved)
        if self.inside(text):
            self.prepare(text)
            return path
        self.refuse(f"a call to {family}: {label} (writing {text[:200]!r} outside the cell's working folder)", text)


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


def _os_file_new(vet: _ArrowVet) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """pyarrow's original `OSFile` made in a writing mode (round 9): the path vetted as any writer's, whoever makes
    it (the class reached any way, or pyarrow's own C code: `get_writer` behind `CompressedOutputStream`, `CSVWriter`,
    the IPC and Feather writers, `output_stream`). A mode that is not a plain `str` counts as writing."""
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def __new__(cls: type, path: Any = None, mode: Any = "r", *args: Any, **kw: Any) -> Any:
            path = _nv_text(path)
            if not isinstance(path, int) and (type(mode) is not str or _arrow_writes(mode)):
                path = vet.path("pyarrow.lib.OSFile", path, rewrite=True)
            return orig(cls, path, mode, *args, **kw)
        return __new__
    return make


def _arrow_lib(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
    d = mod.__dict__
    out: dict[str, Any] = {}
    os_file, output_stream = d.get("OSFile"), d.get("output_stream")
    compressed, memory_map, create_memory_map = d.get("CompressedOutputStream"), d.get("memory_map"), d.get(
        "create_memory_map")
    if isinstance(os_file, type):
        def new_os_file(cls: type, path: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
            if _arrow_writes(mode):
                path = vet.path("pyarrow.OSFile", path, rewrite=True)
            return _new_of(os_file)(cls, path, mode, *args, **kw)
        out["OSFile"] = _subclass(os_file, {"__new__": new_os_file})
        replace_type_new(os_file, _os_file_new(vet))  # (the original class itself: round 9)
    if isinstance(compressed, type):
        def new_compressed(cls: type, stream: Any, *args: Any, **kw: Any) -> Any:
            stream = vet.path("pyarrow.CompressedOutputStream", stream, rewrite=True)
            return _new_of(compressed)(cls, stream, *args, **kw)
        out["CompressedOutputStream"] = _subclass(compressed, {"__new__": new_compressed})
    if callable(output_stream):
        def output_stream_vetted(source: Any, *args: Any, **kw: Any) -> Any:
            source = vet.path("pyarrow.output_stream", source, rewrite=True)
            return output_stream(source, *args, **kw)
        out["output_stream"] = output_stream_vetted
    if callable(memory_map):
        def memory_map_vetted(path: Any, mode: str = "r") -> Any:
            if _arrow_writes(mode):
                path = vet.path("pyarrow.memory_map", path, rewrite=True)
            return memory_map(path, mode)
        out["memory_map"] = memory_map_vetted
    mapped = d.get("MemoryMappedFile")
    if isinstance(mapped, type):  # (in the class: `memory_map`'s original and `MemoryMappedFile.create` reach them)
        def vetted_open(orig: Any) -> Callable:
            def _open(self: Any, path: Any, mode: Any = "r", *args: Any, **kw: Any) -> Any:
                if _arrow_writes(mode):
                    path = vet.path("pyarrow.MemoryMappedFile", path, rewrite=True)
                return orig(self, path, mode, *args, **kw)
            return _open

        def vetted_create(orig: Any) -> Any:
            make = orig.__func__ if isinstance(orig, staticmethod) else orig

            def create(path: Any, size: Any) -> Any:
                path = vet.path("pyarrow.MemoryMappedFile.create", path, rewrite=True)
                return make(path, size)
            return staticmethod(create)
        replace_type_method(mapped, "_open", vetted_open)
        replace_type_method(mapped, "create", vetted_create)
    encode = d.get("encode_file_path")
    if callable(encode):
        # every path pyarrow.lib opens natively (`OSFile`, `memory_map`, the originals of the classes above too)
        # is encoded by this module-level function, which Cython looks up in the module's dict at each call
        def encode_file_path(path: Any) -> Any:
            _announce_read(path)
            return encode(path)
        out["encode_file_path"] = encode_file_path
    if callable(create_memory_map):
        def create_memory_map_vetted(path: Any, size: Any) -> Any:
            path = vet.path("pyarrow.create_memory_map", path, rewrite=True)
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
                args = tuple(vet.path(f"pyarrow.fs.LocalFileSystem.{_name}", a, rewrite=True) if i in _where else a
                             for i, a in enumerate(args))
                for key in ("path", "src", "dest"):
                    if key in kw:
                        kw[key] = vet.path(f"pyarrow.fs.LocalFileSystem.{_name}", kw[key], rewrite=True)
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
    if isinstance(base, type) and isinstance(subtree, type):
        _arrow_fs_type(base, subtree, vet)
    if isinstance(subtree, type) and isinstance(local, type):
        def new_subtree(cls: type, base_path: Any, base_fs: Any, *args: Any, **kw: Any) -> Any:
            if isinstance(base_fs, local):
                vet.path("pyarrow.fs.SubTreeFileSystem over a local folder", base_path)
            return _new_of(subtree)(cls, base_path, base_fs, *args, **kw)
        out["SubTreeFileSystem"] = _subclass(subtree, {"__new__": new_subtree})
    return out


# pyarrow's own `FileSystem` methods that open, write, move or delete by path: (argument index, writes?) per path
_ARROW_FS_CALLS: dict[str, tuple[tuple[int, bool], ...]] = {
    "open_output_stream": ((0, True),), "open_append_stream": ((0, True),), "create_dir": ((0, True),),
    "delete_dir": ((0, True),), "delete_dir_contents": ((0, True),), "delete_file": ((0, True),),
    "delete_root_dir_contents": (), "move": ((0, True), (1, True)), "copy_file": ((0, False), (1, True)),
    "open_input_stream": ((0, False),), "open_input_file": ((0, False),)}
_ARROW_FS_KEYWORDS = {"path": 0, "src": 0, "dest": 1}


def _arrow_fs_type(base: type, subtree: type, vet: _ArrowVet) -> None:
    """Round 8: pyarrow's `FileSystem` methods vetted in the class itself (worker/guard.replace_type_method), so
    every file system pyarrow makes — `pyarrow._fs.LocalFileSystem`, `FileSystem.from_uri`, a dataset's or a
    sub-tree's, one wrapped in `SubTreeFileSystem` at any depth — and every way to its methods (a bound method
    handed to `map` or to C code, `type(fs).delete_file`, the `__mro__`) meets the same decision: the path is
    followed through the sub-trees to the local path it names; a write there is vetted as the path writers are,
    a read is announced to the audit layer as the open it is (the kernel's connection file, another process's
    entries); a file system of any other kind (s3, gcs, hdfs, ...: native network) is refused."""
    type_name = base.__dict__["type_name"].__get__  # (the class's own: a subclass's property changes nothing)
    sub_path, sub_fs = subtree.__dict__["base_path"].__get__, subtree.__dict__["base_fs"].__get__

    def where(fs: Any, path: Any) -> tuple[str, Any]:
        for _ in range(64):
            kind = type_name(fs)
            if kind != "subtree" or not isinstance(fs, subtree):
                return str(kind), path
            path, fs = str(sub_path(fs)).rstrip("/") + "/" + os.fsdecode(path).lstrip("/"), sub_fs(fs)
        return "subtree", None

    def vetting(name: str, spots: tuple[tuple[int, bool], ...]) -> Callable[[Any], Callable]:
        label = f"pyarrow.fs.FileSystem.{name}"

        def make(orig: Any) -> Callable:
            def call(self: Any, *args: Any, **kw: Any) -> Any:
                todo = [("/", True)] if name == "delete_root_dir_contents" else [
                    (args[i], w) for i, w in spots if i < len(args)]
                todo += [(v, dict(spots).get(_ARROW_FS_KEYWORDS[k], True)) for k, v in kw.items()
                         if k in _ARROW_FS_KEYWORDS]
                for path, writes in todo:
                    if not isinstance(path, (str, bytes, os.PathLike)):
                        continue
                    kind, local = where(self, path)
                    if kind == "local" and local is not None:
                        if writes:
                            vet.path(label, local)
                        else:
                            _announce_read(local)
                    elif kind not in _NOT_NATIVE_FS:
                        vet.refuse(f"a call to pyarrow: {label} (a {kind!r} file system: native, not vetted)", None)
                return orig(self, *args, **kw)
            call.__name__ = call.__qualname__ = name
            call.__doc__ = getattr(orig, "__doc__", None)
            return call
        return make

    for name, spots in _ARROW_FS_CALLS.items():
        replace_type_method(base, name, vetting(name, spots))
    # the table's writers that take a file system (`ds.write_dataset(..., filesystem=)` writes in C++): their path
    # is vetted where it leads through that file system (worker/guard.py `_through_file_system`)
    FILE_SYSTEM_PATHS.append(lambda fs, path: where(fs, path) if isinstance(fs, base) else None)


def _announce_read(path: Any) -> None:
    """A path pyarrow or polars is about to read natively (no audit event of its own), announced to the audit layer
    as the read-only open it is: the hook refuses the kernel's connection file, Jupyter's runtime folders and
    another process's entries there (worker/portable.py). A glob pattern (polars' scans expand it natively) is
    announced with what it matches (listing its folders: listing the runtime folder is refused too)."""
    if isinstance(path, (list, tuple)):
        for p in path[:1000]:
            _announce_read(p)
        return
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    try:
        text = os.fsdecode(os.fspath(path))
    except (TypeError, ValueError):
        return
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif _URL.match(text):
        return  # another scheme: not a local path
    text = os.path.expanduser(text)
    sys.audit("open", text, "r", os.O_RDONLY)
    if any(c in text for c in "*?["):
        import glob
        for match in glob.iglob(text, recursive=True):
            sys.audit("open", match, "r", os.O_RDONLY)


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
        sink = vet.path("pyarrow.csv.CSVWriter", sink, rewrite=True)
        return _new_of(writer)(cls, sink, *args, **kw)
    return {"CSVWriter": _subclass(writer, {"__new__": new_writer})}


def _path_funnel(attr: str, prefix: str) -> Callable[[types.ModuleType, _ArrowVet], dict[str, Any]]:
    """The function `attr` through which a library turns every path it reads natively into text (pyarrow's
    `_stringify_path`: readers, datasets, parquet, csv, json, ipc; polars' `normalize_filepath`: its readers and
    scans), replaced by one that announces the path as read (`_announce_read`) — also in the modules of the
    library (`prefix`) that imported it by name before."""
    def make(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
        orig = mod.__dict__.get(attr)
        if not callable(orig):
            return {}

        def funnel(path: Any, *args: Any, **kw: Any) -> Any:
            _announce_read(path)
            return orig(path, *args, **kw)
        funnel.__name__ = funnel.__qualname__ = attr
        funnel.__doc__ = getattr(orig, "__doc__", None)
        for name, m in list(sys.modules.items()):
            if name.startswith(prefix) and type(m) is types.ModuleType and m is not mod \
                    and m.__dict__.get(attr) is orig:
                m.__dict__[attr] = funnel
        return {attr: funnel}
    return make


def _writer_funnel(label: str) -> Callable[[types.ModuleType, _ArrowVet], dict[str, Any]]:
    """Round 9: a Cython module whose writers open their path in C++ themselves (`pyarrow._parquet`'s
    `ParquetWriter` and `FileMetaData.write_metadata_file`, `pyarrow._orc`'s `ORCWriter`: `FileOutputStream.Open`
    of the text `_stringify_path` gives) and that calls `_stringify_path` for nothing else: the module's
    `_stringify_path` (looked up in its dict at each call, whoever reached the class) vets the text as a write."""
    def make(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
        orig = mod.__dict__.get("_stringify_path")
        if not callable(orig):
            return {}

        def _stringify_path(path: Any) -> Any:
            text = _nv_text(orig(path))  # (TypeError for a file object: the writer then writes through it)
            vet.path(label, text)
            return text
        _stringify_path.__doc__ = getattr(orig, "__doc__", None)
        return {"_stringify_path": _stringify_path}
    return make


# Round 9: Cython functions that write in C++ through a file system they are handed: name -> (label, file system's
# argument index, destination's argument index, writes a folder of files)
_ARROW_NATIVE_CALLS: dict[str, dict[str, tuple[str, int, int, bool]]] = {
    "pyarrow._fs": {"_copy_files": ("pyarrow.fs.copy_files", 2, 3, False),
                    "_copy_files_selector": ("pyarrow.fs.copy_files", 2, 3, True)},
    "pyarrow._dataset": {"_filesystemdataset_write": ("pyarrow.dataset.write_dataset", 3, 1, True)}}
_ARROW_NATIVE_KEYWORDS = {"destination_fs": 2, "destination_path": 3, "destination_base_dir": 3,
                          "filesystem": 3, "base_dir": 1}


def _arrow_native_calls(name: str) -> Callable[[types.ModuleType, _ArrowVet], dict[str, Any]]:
    """The module's `_ARROW_NATIVE_CALLS`, each replaced by one that vets its destination through its file system
    (`_ArrowVet.through`) before the original writes."""
    def make(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for fname, (label, fs_at, dest_at, tree) in _ARROW_NATIVE_CALLS[name].items():
            orig = mod.__dict__.get(fname)
            if not callable(orig):
                continue

            def call(*args: Any, _orig: Any = orig, _label: str = label, _fs_at: int = fs_at, _dest_at: int = dest_at,
                     _tree: bool = tree, **kw: Any) -> Any:
                got = {i: a for i, a in enumerate(args)}
                got.update({_ARROW_NATIVE_KEYWORDS[k]: v for k, v in kw.items() if k in _ARROW_NATIVE_KEYWORDS})
                fs, dest = got.get(_fs_at), _nv_text(got.get(_dest_at))
                if isinstance(dest, (str, bytes)):
                    vet.through(_label, fs, dest, _tree)
                    if _dest_at < len(args):
                        args = args[:_dest_at] + (dest,) + args[_dest_at + 1:]
                return _orig(*args, **kw)
            call.__name__ = call.__qualname__ = fname
            call.__doc__ = getattr(orig, "__doc__", None)
            out[fname] = call
        return out
    return make


def _arrow_both(*makers: Callable[[types.ModuleType, _ArrowVet], dict[str, Any]]) -> Callable[
        [types.ModuleType, _ArrowVet], dict[str, Any]]:
    def make(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for maker in makers:
            out.update(maker(mod, vet))
        return out
    return make


# Round 9: polars' own Rust classes write natively (`df._df.write_json(path)`, `lf._ldf.sink_csv(target=path)`):
# their writers are vetted in the classes (their dicts: every way to the method meets it). class -> {method:
# (argument index, keyword)}
_POLARS_WRITERS = {
    "PyDataFrame": {n: (0, "py_f") for n in ("write_avro", "write_ipc_stream", "write_json", "serialize_binary",
                                              "serialize_json", "write_csv", "write_parquet", "write_ipc")},
    "PyLazyFrame": {**{n: (0, "target") for n in ("sink_parquet", "sink_csv", "sink_ipc", "sink_ndjson")},
                    **{n: (0, "py_f") for n in ("serialize_binary", "serialize_json")}}}


def _polars_target(vet: _ArrowVet, label: str, target: Any) -> Any:
    """What a polars native writer is handed, vetted: a path (the one plain text handed on), a partitioned sink's
    base folder (a path provider of the cell's own: refused, its paths are not known ahead); a file object is
    written through Python (its own open was vetted)."""
    if isinstance(target, (str, bytes, os.PathLike)):
        target = _nv_text(target)
        text = os.fsdecode(target)
        if _URL.match(text) and not text.startswith("file://"):
            vet.refuse(f"a call to polars: {label} (writing to a URL)", None)
        vet.path(label, target, "polars")
        return target
    inner = getattr(target, "_pl_partition_by", None)
    if inner is not None:
        part = sys.modules.get("polars.io.partition")
        kind = part.__dict__.get("_PartitionByInner") if type(part) is types.ModuleType else None
        fields = inner.__dict__ if type(inner) is kind else {}
        base = fields.get("base_path")
        if type(base) is not str or fields.get("file_path_provider") is not None:
            vet.refuse(f"a call to polars: {label} (a partitioned sink whose paths are not known ahead)", None)
        vet.path(label, base, "polars")
        vet.prepare_tree(base)
    return target


def _polars_native(mod: types.ModuleType, vet: _ArrowVet) -> dict[str, Any]:
    for cname, methods in _POLARS_WRITERS.items():
        t = mod.__dict__.get(cname)
        if not isinstance(t, type):
            continue
        for mname, (at, key) in methods.items():
            label = f"{cname}.{mname}"

            def vetting(orig: Any, _label: str = label, _at: int = at, _key: str = key) -> Callable:
                def call(self: Any, *args: Any, **kw: Any) -> Any:
                    if len(args) > _at:
                        args = args[:_at] + (_polars_target(vet, _label, args[_at]),) + args[_at + 1:]
                    elif _key in kw:
                        kw[_key] = _polars_target(vet, _label, kw[_key])
                    return orig(self, *args, **kw)
                call.__name__ = call.__qualname__ = _label.rpartition(".")[2]
                call.__doc__ = getattr(orig, "__doc__", None)
                return call
            replace_type_method(t, mname, vetting)
    return {}


# Cython module -> (its replacements' maker, the Python modules that re-export its names)
_ARROW_TARGETS: dict[str, tuple[Callable[[types.ModuleType, _ArrowVet], dict[str, Any]], tuple[str, ...]]] = {
    "pyarrow.lib": (_arrow_lib, ("pyarrow",)),
    "pyarrow._fs": (_arrow_both(_arrow_fs, _arrow_native_calls("pyarrow._fs")), ("pyarrow.fs",)),
    "pyarrow._csv": (_arrow_csv, ("pyarrow.csv",)),
    "pyarrow._parquet": (_writer_funnel("pyarrow.parquet.ParquetWriter"), ()),
    "pyarrow._orc": (_writer_funnel("pyarrow.orc.ORCWriter"), ()),
    "pyarrow._dataset": (_arrow_native_calls("pyarrow._dataset"), ("pyarrow.dataset",)),
    "polars._plr": (_polars_native, ()), "polars.polars": (_polars_native, ()),
    "pyarrow.util": (_path_funnel("_stringify_path", "pyarrow"), ()),
    "polars._utils.various": (_path_funnel("normalize_filepath", "polars"), ()),
    **NATIVE_TARGETS}  # (round 10: h5py's, torch's and TensorFlow's native writers, worker/native.py)
_ARROW_DONE: dict[str, dict[str, Any]] = {}
_ARROW_ORIGINALS: dict[str, dict[str, Any]] = {}
_REEXPORTED_ONLY = frozenset(("FileSystem",))


def _arrow_patch(name: str, vet: _ArrowVet) -> None:
    mod = sys.modules.get(name)
    if name in _ARROW_DONE or type(mod) is not types.ModuleType:
        return
    make, users = _ARROW_TARGETS[name]
    # (the originals as they were before the maker ran: a maker may replace them in the module's dict itself,
    # worker/native.py's do, and the re-exporters are matched against these: TensorFlow's `pywrap_tfe` kept the
    # unvetted eager executors, so no eager op was vetted)
    before = dict(mod.__dict__)
    try:
        new = make(mod, vet)
    except Exception:  # noqa: BLE001 - a pyarrow this does not know: its writers stay as they are (Landlock holds)
        new = {}
    _ARROW_DONE[name] = new
    _ARROW_ORIGINALS[name] = {attr: before.get(attr) for attr in new}
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
                refuse: Callable[[str, Any], object], scratch: str,
                prepare_tree: Callable[[Any], object] | None = None,
                translate: Callable[[Any], str | None] | None = None) -> list[str]:
    """Replace pyarrow's path-taking native writers now (those loaded) and when the cell loads them; returns the
    modules already done."""
    vet = _ArrowVet(inside, prepare, refuse, scratch, prepare_tree, translate)
    for name in _ARROW_TARGETS:
        _arrow_patch(name, vet)
    if not any(isinstance(f, _ArrowAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _ArrowAfterImport(vet))
    return sorted(n for n in _ARROW_DONE if _ARROW_DONE[n])

"""Transplant, kernel side: export what one cell needs from the user's kernel into the run's private directory.

Installed privately as `_crane_transplant` (see `crane.sandbox.transplant`) and called through a private
request, like the probe: it binds no name in the user's namespace, runs no user code (an object, at any depth,
whose class in the notebook or a module of the user's own defines a pickling or attribute hook is refused by the
pickler: `_user_hook`), leaves RNG states and event callbacks alone. `export(args_json)` writes into `args["dir"]`:
- `state.pkl`: `{name: object}` for the names the cell reads, pickled with CRANE's private copy of cloudpickle
  (`sys.modules["_crane_cloudpickle"]`, never the user's) at protocol 5: functions, lambdas and classes of the
  notebook by value, everything else the way its library pickles it (Keras models through their own
  serialization, tf/jax arrays as host arrays); torch tensors on a GPU arrive as CPU tensors;
- `buf-N`: the out-of-band buffers of protocol 5 (numpy/pandas/arrow data, written once, no in-memory copy);
- `env.json`: the interpreter, cwd, environment, `sys.path`, the modules to import again, torch's CUDA facts.
Large values are shrunk BEFORE they are copied (kernel/miniature's rules: consistent row subsets, NaN rows and one
row per class kept, on a copy of the cell's names, never the user's namespace): in a miniature run
(`args["miniature"]`), and when the values the cell reads hold more than `args["copy_mb"]` MiB. Then
`state.pkl` also holds, under a key no Python name can have, what the worker needs about each original for
kernel/miniature's `artefact` (the original index, the distinct values of label-like columns).
What cannot be pickled (open files, sockets, generators, locks, connections, ...) makes the answer
`{"ok": False, "reason": "... `name` (type) ..."}`.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import sys
import time
from typing import Any

from crane.sandbox.kernel.library import is_library  # kernel: strip
from crane.sandbox.kernel.miniature import _REGISTRY, _kind, shrink_namespace  # kernel: strip

_SKIP = {"In", "Out", "get_ipython", "exit", "quit", "_ih", "_oh", "_dh", "_", "__", "___", "__builtins__",
         "__builtin__", "__name__", "__doc__", "__spec__", "__loader__", "__package__"}
_OWN_HOOKS = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
# modules of the kernel itself, not of the notebook: never imported again in a worker
_KERNEL_MODS = ("ipykernel", "IPython", "jupyter_client", "jupyter_core", "zmq", "tornado", "traitlets", "comm",
                "debugpy", "prompt_toolkit", "pygments", "jedi", "parso", "matplotlib_inline", "psutil",
                "nest_asyncio", "pexpect", "ptyprocess", "wcwidth", "stack_data", "executing", "asttokens",
                "pure_eval", "decorator", "platformdirs", "dateutil", "pickleshare", "backcall", "six", "_pytest")


def _names(shell, source: str) -> list[str]:
    """Names the cell reads, after IPython's transforms (a pure text transform: no history, no callbacks)."""
    try:
        text = shell.input_transformer_manager.transform_cell(source) if shell is not None else source
        tree = ast.parse(text)
    except Exception:
        return []
    out: list[str] = []
    for node in ast.walk(tree):  # magics and shell escapes: the names in their text (`%timeit f(x)`, `!ls {d}`)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_line_magic", "run_cell_magic", "system", "getoutput")):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out += [n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", arg.value) if n not in out]
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            node = node.target  # read, then written
        elif not (isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del))):
            continue
        if node.id not in out:
            out.append(node.id)
    return out


def _type_name(obj) -> str:
    t = type(obj)
    mod = getattr(t, "__module__", "") or ""
    return t.__qualname__ if mod in ("builtins", "__main__") else f"{mod}.{t.__qualname__}"


def _own_hooks(obj) -> bool:
    """The object's class, defined in the notebook, has pickling hooks of its own (notebook code)."""
    t = type(obj)
    for klass in getattr(t, "__mro__", (t,)):
        if getattr(klass, "__module__", None) == "__main__" and any(h in vars(klass) for h in _OWN_HOOKS):
            return True
    return False


def _unreproducible(obj) -> str | None:
    """State of a library object its own serialization does not carry, which the cell may depend on."""
    mod = getattr(type(obj), "__module__", "") or ""
    if mod.startswith(("keras.", "tf_keras.", "tensorflow.")):
        try:
            d = object.__getattribute__(obj, "__dict__")
        except Exception:
            return None
        traced = any(d.get(f) is not None for f in ("train_function", "test_function", "predict_function"))
        opt = d.get("_optimizer") or d.get("optimizer")
        if traced and opt is not None and getattr(opt, "built", True) is False:
            return ("has a traced training step whose optimizer was never built (a failed fit): a copy rebuilt "
                    "from its configuration and weights would not fail the way the kernel's model does")
    return None


# what pickling may call on an object besides reading its __dict__: code of the object's class
_CALLED_HOOKS = _OWN_HOOKS + ("__getnewargs__", "__getnewargs_ex__", "__getattr__", "__getattribute__")
_USER_HOOKS: dict = {}  # class -> the hook user code defines for it, or ""


def _user_module(name: str | None) -> bool:
    """The module is the notebook or a file of the user's own (not under the interpreter's prefixes)."""
    if not name or name == "__main__":
        return True
    mod = sys.modules.get(name)
    path = getattr(mod, "__file__", None)
    if mod is None or not path:
        return False  # built in, or gone: not user code we could run
    return not is_library(path)


def _user_hook(cls) -> str:
    """The pickling hook (or attribute hook) user code defines for `cls`, '' when none."""
    found = _USER_HOOKS.get(cls)
    if found is None:
        found = ""
        for klass in getattr(cls, "__mro__", (cls,)):
            if _user_module(getattr(klass, "__module__", None)):
                hook = next((h for h in _CALLED_HOOKS if h in vars(klass)), "")
                if hook:
                    found = f"{hook} of {getattr(klass, '__module__', '?')}.{klass.__qualname__}"
                    break
        _USER_HOOKS[cls] = found
    return found


def _pickler_class(cp):
    torch = sys.modules.get("torch")

    base: Any = cp.CloudPickler

    class Pickler(base):
        def reducer_override(self, obj):
            if not isinstance(obj, type):  # (classes themselves are copied by value, reading their dict)
                hook = _user_hook(type(obj))
                if hook:  # pickling it would run that code in the user's kernel
                    raise TypeError(f"{_type_name(obj)} has its own {hook}: copying it would run the user's code "
                                    "in the kernel")
            if isinstance(obj, io.IOBase) and not isinstance(obj, (io.BytesIO, io.StringIO)):
                raise TypeError(f"cannot copy an open file or stream ({type(obj).__name__})")
            if torch is not None and isinstance(obj, torch.Tensor):
                try:
                    if obj.device.type == "cpu" and type(obj) in (torch.Tensor, torch.nn.Parameter) \
                            and "_crane_vdev" not in obj.__dict__:
                        # a new Python object over the same storage carries the device (worker/devices.py): the
                        # user's tensor is not touched
                        alias = obj.detach()
                        if isinstance(obj, torch.nn.Parameter):
                            alias = torch.nn.Parameter(alias, requires_grad=obj.requires_grad)
                        elif obj.requires_grad:
                            alias.requires_grad_(True)
                        alias.__dict__.update(obj.__dict__)
                        alias.__dict__["_crane_vdev"] = "cpu"
                        return alias.__reduce_ex__(5)
                    if obj.device.type not in ("cpu", "meta"):
                        host = obj.detach().to("cpu")
                        if isinstance(obj, torch.nn.Parameter):
                            host = torch.nn.Parameter(host, requires_grad=obj.requires_grad)
                        elif obj.requires_grad:
                            host.requires_grad_(True)
                        host.__dict__["_crane_vdev"] = str(obj.device)  # the worker keeps it (worker/devices.py)
                        return host.__reduce_ex__(5)
                except Exception:
                    pass
            return super().reducer_override(obj)

    return Pickler


def _dump(cp, objs: dict, buffers: list):
    data = io.BytesIO()

    def keep(pb) -> bool:
        try:
            buffers.append(pb.raw())
        except BufferError:
            return True  # not contiguous: in band
        return False

    _pickler_class(cp)(data, protocol=5, buffer_callback=keep).dump(objs)
    return data.getbuffer()


def _culprit(cp, objs: dict) -> str:
    for name, obj in objs.items():
        try:
            _dump(cp, {name: obj}, [])
        except Exception as exc:
            return f"`{name}` ({_type_name(obj)}) cannot be copied into a separate process: {type(exc).__name__}: {exc}"
    return "the cell's inputs cannot be copied into a separate process"


def _modules() -> list[str]:
    std = getattr(sys, "stdlib_module_names", ())
    out: list[str] = []
    for name in list(sys.modules):
        top = name.partition(".")[0]
        if top in out or top in std or top.startswith(("_", "pydev")) or top in _KERNEL_MODS:
            continue
        mod = sys.modules.get(top)
        if mod is not None and getattr(mod, "__file__", None):
            out.append(top)
    return out


def _torch_facts() -> dict:
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_initialized():
            return {"cuda": False}
        n = torch.cuda.device_count()
        return {"cuda": True, "count": n, "names": [torch.cuda.get_device_name(i) for i in range(n)]}
    except Exception:
        return {"cuda": False}


def _raw_bytes(obj) -> int:
    """The memory of an array-like value (numpy, pandas without deep object sizes, torch), one level into dicts,
    lists and tuples: what copying it whole would cost. Reads sizes only (no user code)."""
    def one(v) -> int:
        mod = type(v).__module__ or ""
        try:
            if mod.startswith("numpy") and hasattr(v, "nbytes"):
                return int(v.nbytes)
            if mod.startswith("pandas") and hasattr(v, "memory_usage"):
                used = v.memory_usage(index=True, deep=False)
                return int(used.sum() if hasattr(used, "sum") else used)
            if mod.startswith("torch") and hasattr(v, "element_size") and hasattr(v, "numel"):
                return int(v.element_size() * v.numel())
        except Exception:
            return 0
        return 0
    total = one(obj)
    if not total and type(obj) in (dict, list, tuple) and len(obj) <= 32:
        total = sum(one(v) for v in (obj.values() if type(obj) is dict else obj))
    return total


def _in_kernel_ok(obj) -> bool:
    """Shrinking runs library code in the kernel: only for values whose subsets touch no file (a Hugging Face
    dataset's `select` may write an indices cache: those are copied whole)."""
    vals = obj.values() if type(obj) is dict else obj if type(obj) in (list, tuple) else ()
    return all((_kind(v) or ("",))[0] != "HFDataset" for v in [obj, *list(vals)[:32]])


def _known(kind: str, orig) -> dict | None:
    """What the worker needs to tell a label the subset dropped from one the data never had (kernel/miniature's
    `artefact`): the original index (RangeIndex, or up to 1M labels; else unknown) and, for each label-like
    column, its dtype and the sorted stable hashes (pandas' `hash_array`) of its distinct values (up to 1M;
    else unknown). A hash collision can only make a crash inconclusive, never a false one."""
    if kind not in ("DataFrame", "Series"):
        return None
    pd = sys.modules.get("pandas")
    idx = orig.index
    index = idx if (type(idx).__name__ == "RangeIndex" or len(idx) <= 1_000_000) else None
    cols: dict = {}
    pairs = [(None, orig)] if kind == "Series" else [(c, orig[c]) for c in list(orig.columns)[:200]]
    for c, col in pairs:
        try:
            if getattr(col, "ndim", 1) != 1 or col.dtype.kind not in "OiubU":
                continue
            arr = col.to_numpy()
            hashes = sys.modules["numpy"].unique(pd.util.hash_array(arr)) if pd is not None else None
            cols[c] = {"dtype": str(arr.dtype), "hashes": hashes if hashes is not None and len(hashes) <= 1_000_000
                       else None}
        except Exception:
            cols[c] = None
    return {"index": index, "columns": cols}


def _shrink(objs: dict, spec: dict) -> tuple[list, list]:
    """Replace the large values in `objs` (a copy of the cell's names, never the user's namespace) by consistent
    row subsets (kernel/miniature's rules): (kept, what the worker needs about each original)."""
    names = [n for n, o in objs.items() if _in_kernel_ok(o)]
    _REGISTRY["objects"].clear()
    try:
        kept = shrink_namespace(objs, names, spec)
        known = [{"label": label, "kind": kind, "n": n, "k": k, "known": _known(kind, orig)}
                 for label, kind, orig, _new, n, k in _REGISTRY["objects"]]
    finally:
        _REGISTRY["objects"].clear()  # no reference to the user's objects is kept in the kernel
    return kept, known


def _process() -> dict:
    """This kernel's process: pid, start time, pid namespace (the daemon ends its workers when it ends)."""
    out: dict = {"kernel_pid": os.getpid(), "kernel_start": 0, "kernel_pidns": None}
    try:
        with open("/proc/self/stat", "rb") as f:
            data = f.read()
        out["kernel_start"] = int(data[data.rindex(b")") + 2:].split()[19])
        out["kernel_pidns"] = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, ValueError, IndexError):
        pass
    return out


def export(args_json: str) -> dict:
    """Write the state the cell reads into the run's private directory (see the module docstring)."""
    t0 = time.perf_counter()
    args = json.loads(args_json)
    d = args["dir"]
    try:
        with open(os.path.join(d, "token")) as f:
            if f.read() != args["token"]:
                raise OSError("token mismatch")
    except OSError:
        return {"ok": False, "reason": "the kernel does not see the daemon's files (another machine or container)"}
    cp = sys.modules.get("_crane_cloudpickle")
    if cp is None:
        return {"ok": False, "reason": "CRANE's private cloudpickle is not installed in the kernel"}
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except Exception:
        shell = None
    if shell is None:
        return {"ok": False, "reason": "not an IPython kernel"}
    ns = shell.user_ns
    objs: dict = {}
    skip = set(args.get("skip") or ())  # a session's names already copied
    for name in _names(shell, str(args.get("source") or "")):
        if name in _SKIP or name in skip or name not in ns:
            continue
        obj = ns[name]
        if _own_hooks(obj):
            return {"ok": False, "reason": f"`{name}` ({_type_name(obj)}) has pickling hooks defined in the notebook: "
                                           "copying it would run notebook code in the kernel"}
        why = _unreproducible(obj)
        if why:
            return {"ok": False, "reason": f"`{name}` ({_type_name(obj)}) {why}"}
        objs[name] = obj
    spec, why, raw = args.get("miniature"), None, 0
    limit = int(args.get("copy_mb") or 0) << 20
    if not spec and limit:
        raw = sum(_raw_bytes(o) for o in objs.values())
        if raw > limit:
            spec = {"fraction": max(0.0005, min(0.5, limit / raw)), "floor_rows": 64, "min_rows": 2000,
                    "relative": 0.05, "seed": 0}
            why = (f"the values it reads hold {raw / 1e6:,.0f} MB, more than the {limit >> 20} MiB a transplant "
                   "copies whole")
    kept: list = []
    known: list = []
    shrink_error = None
    if spec:
        try:
            kept, known = _shrink(objs, spec)
        except Exception as exc:  # copied whole, as if nothing were large
            shrink_error = f"{type(exc).__name__}: {exc}"
        if kept:
            objs["\x00crane-shrunk"] = known
    buffers: list = []
    try:
        data = _dump(cp, objs, buffers)
    except Exception:
        return {"ok": False, "reason": _culprit(cp, objs)}
    total = len(data)
    tag = str(args.get("tag") or "")  # a session's exports: state-N.pkl, buf-N-i
    tag = f"-{int(tag)}" if tag else ""
    with open(os.path.join(d, f"state{tag}.pkl"), "wb") as f:
        f.write(data)
    sizes = []
    for i, buf in enumerate(buffers):
        with open(os.path.join(d, f"buf{tag}-{i}"), "wb") as f:
            f.write(buf)
        sizes.append(buf.nbytes)
        total += buf.nbytes
    facts: dict = {"executable": sys.executable, "cwd": os.getcwd(), "env": dict(os.environ), "path": list(sys.path),
             "modules": _modules(), "torch": _torch_facts(), "buffers": len(buffers),
             "names": [k for k in ns if isinstance(k, str) and not k.startswith("_")][:100000],
             "interactivity": str(getattr(shell, "ast_node_interactivity", "last_expr"))}
    with open(os.path.join(d, "env.json"), "w") as f:
        json.dump(facts, f)
    objs.pop("\x00crane-shrunk", None)
    return {"ok": True, "copied": [[n, _type_name(o)] for n, o in objs.items()], "bytes": total,
            "kept": kept, "shrunk": why if kept else None, "raw_bytes": raw, "shrink_error": shrink_error,
            "executable": sys.executable, "modules": facts["modules"], "cuda": bool(facts["torch"].get("cuda")),
            **_process(), "export_ms": round((time.perf_counter() - t0) * 1000.0, 3)}

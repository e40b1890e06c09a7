"""Transplant worker, kernel side: torch's GPU devices stood in for by the CPU, with placement kept.

The worker never uses a GPU (it starts with CUDA_VISIBLE_DEVICES empty and JAX_PLATFORMS=cpu: it must not take
GPU memory or driver state from the user's kernel). Tensors that lived on a GPU in the kernel arrive on the CPU
tagged with their device (`kernel/export`'s pickler); the cell's own requests (`device='cuda'`, `.to('cuda')`,
`.cuda()`) are answered on the CPU; `torch.cuda` answers as it did in the kernel (available, device count and
names; stream capture never on; synchronisation and memory calls are no-ops).

So that placement errors still reproduce, every tensor the worker sees made keeps a *virtual* device (an
attribute in its `__dict__`, which pickling keeps): factories take their `device=` (default: the CPU), transfers
their target (a transfer between virtual devices copies, as the real one does), other operations the device of
their inputs; `.device`, `.is_cuda` and `.get_device()` answer with it. torch's placement errors are raised where
torch raises them:
- an operation computing across devices (matmul/linear/conv, elementwise arithmetic and comparisons, cat/stack,
  losses, embedding, where) with tensors on two devices, a 0-dim CPU tensor excepted (torch allows a CPU
  scalar) → RuntimeError "Expected all tensors to be on the same device, ...";
- `.numpy()` / `np.asarray` on a GPU tensor → TypeError "can't convert cuda:0 device type tensor to numpy. ...".
The kernel's CPU tensors arrive tagged 'cpu' (the pickler tags a new Python object over the same storage), and
`torch.from_numpy`/`frombuffer`/`from_dlpack` tag theirs. Tensors made where the mode cannot see (autograd's
gradients, C++ internals, a deep copy of a module, `torch.load`) have no virtual device and never take part in a mismatch: an error is raised only where
it is certain. A GPU call the CPU cannot answer (CUDA events, device properties, ...) fails as it does without
a driver; `kernel/run` then says the run could not decide (`_SETUP["devices_mapped"]`), never a certain crash.
"""

from __future__ import annotations

import sys
from typing import Any

from crane.sandbox.kernel.common import _SETUP  # kernel: strip

TAG = "_crane_vdev"
_GPU_TYPES = ("cuda", "mps", "xpu")
# operations whose tensor arguments must all be on one device (torch raises otherwise)
_CROSS = frozenset((
    "linear bilinear conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d matmul mm bmm addmm "
    "addmv addbmm baddbmm mv dot vdot inner outer einsum tensordot cat concat concatenate stack hstack vstack "
    "dstack embedding embedding_bag cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss "
    "binary_cross_entropy binary_cross_entropy_with_logits kl_div cosine_similarity pairwise_distance "
    "cosine_embedding_loss margin_ranking_loss triplet_margin_loss where add sub subtract mul multiply div divide "
    "true_divide floor_divide remainder fmod pow atan2 maximum minimum fmax fmin eq ne lt le gt ge "
    "__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ __truediv__ __rtruediv__ "
    "__itruediv__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __matmul__ __rmatmul__ "
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __xor__ add_ sub_ mul_ div_ addmm_ "
    "masked_fill_ index_add_ scatter_ scatter_add_ lerp lerp_ addcmul addcdiv clamp clip"
).split())
_TO_HOST = frozenset(("numpy", "__array__"))


def vdev(t: Any) -> str | None:
    """A tensor's virtual device ('cuda:0', 'cpu'), or None where it is not known."""
    try:
        return t.__dict__.get(TAG)
    except AttributeError:
        return None


def _virtual(torch: Any, dev: Any) -> str | None:
    """The virtual device a `device` argument names ('cuda' → 'cuda:0'), or None when it names none."""
    if isinstance(dev, int) and not isinstance(dev, bool):
        return f"cuda:{dev}"
    try:
        d = torch.device(dev) if isinstance(dev, (str, torch.device)) else None
    except Exception:
        return None
    if d is None:
        return None
    if d.type in _GPU_TYPES:
        return f"{d.type}:{d.index if d.index is not None else 0}"
    return d.type


def _tensors(torch: Any, obj: Any, out: list, depth: int = 0) -> list:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif depth < 2 and isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(torch, x, out, depth + 1)
    elif depth < 2 and isinstance(obj, dict):
        for x in obj.values():
            _tensors(torch, x, out, depth + 1)
    return out


def _mismatch(a: str, b: str) -> RuntimeError:
    exc = RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")
    exc._crane_device = True  # type: ignore[attr-defined]  # a placement error, certain: not a stand-in's gap
    return exc


def _to_host(dev: str) -> TypeError:
    exc = TypeError(f"can't convert {dev} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
                    "memory first.")
    exc._crane_device = True  # type: ignore[attr-defined]
    return exc


def _mode_class(torch: Any) -> type:
    from torch.overrides import TorchFunctionMode

    cpu = torch.device("cpu")

    def on_cpu(dev: Any) -> Any:
        v = _virtual(torch, dev)
        return cpu if v is not None and v.split(":")[0] in _GPU_TYPES else dev

    def tag(result: Any, dev: str | None, inputs: list) -> None:
        if dev is None:
            return
        for t in _tensors(torch, result, []):
            if not any(t is i for i in inputs):
                t.__dict__[TAG] = dev

    def attribute(func: Any, name: str, args: tuple) -> Any:
        obj = args[0] if args else None
        dev = vdev(obj)
        if func.__name__ == "__set__":
            out = func(*args)
            if name == "data" and len(args) > 1:
                new = vdev(args[1])
                if new is not None:
                    obj.__dict__[TAG] = new
                else:
                    obj.__dict__.pop(TAG, None)
            return out
        if dev is not None and dev != "cpu":
            if name == "device":
                return torch.device(dev)
            if name == "is_cuda":
                return dev.startswith("cuda")
        out = func(*args)
        if isinstance(out, torch.Tensor) and dev is not None and out is not obj:
            out.__dict__[TAG] = dev  # .grad, .data, .T, .mT, .real ...
        return out

    class VirtualDevices(TorchFunctionMode):
        def __torch_function__(self, func: Any, types_: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name in ("__get__", "__set__"):
                owner = getattr(func, "__self__", None)
                return attribute(func, getattr(owner, "__name__", ""), args)
            target = None
            if "device" in kwargs:
                target = _virtual(torch, kwargs["device"])
                kwargs["device"] = on_cpu(kwargs["device"])
            inputs = _tensors(torch, args, []) + _tensors(torch, kwargs, [])
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            src = vdev(first) if first is not None else None
            if name in ("cuda", "mps", "xpu") and first is not None:
                index = args[1] if len(args) > 1 else kwargs.get("device")
                target = _virtual(torch, f"{name}:{index}" if isinstance(index, int) else name)
                return _move(first, target, src)
            if name == "cpu" and first is not None:
                return _move(first, "cpu", src)
            if name == "to" and first is not None and len(args) > 1:
                dest = args[1]
                if isinstance(dest, torch.Tensor):
                    target = vdev(dest)
                elif not isinstance(dest, torch.dtype):
                    target = _virtual(torch, dest) or target
                    args = (first, on_cpu(dest) if not isinstance(dest, int) or isinstance(dest, bool) else cpu,
                            *args[2:])
                if target is not None and target != src and (src is not None or target != "cpu") \
                        and not kwargs.get("copy"):
                    kwargs["copy"] = True  # a transfer between (virtual) devices makes a new tensor, as on a GPU
                out = func(*args, **kwargs)
                tag(out, target or src, [] if kwargs.get("copy") else [first])
                return out
            if name == "get_device" and first is not None and src is not None and src != "cpu":
                return int(src.split(":")[1])
            if name in _TO_HOST and first is not None and src is not None and src != "cpu":
                raise _to_host(src)
            if name in _CROSS:
                seen = None
                for t in inputs:
                    d = vdev(t)
                    if d is None or (d == "cpu" and t.dim() == 0):
                        continue  # not known here; a CPU scalar goes with any device
                    if seen is None:
                        seen = d
                    elif d != seen:
                        raise _mismatch(seen, d)
            out = func(*args, **kwargs)
            if target is None:
                known = [d for d in (vdev(t) for t in inputs) if d is not None]
                target = next((d for d in known if d != "cpu"), known[0] if known else None)
                if not inputs:
                    target = "cpu"  # a factory without device=: torch's default device
            tag(out, target, [] if name.endswith("_") and not name.endswith("__") else inputs)
            return out

    def _move(t: Any, target: str | None, src: str | None) -> Any:
        if target is None or target == src:
            return t
        out = t.to(cpu, copy=True) if src is not None or target != "cpu" else t
        if out is not t:
            out.__dict__[TAG] = target
        return out

    return VirtualDevices


def _stand_in_cuda(torch: Any, facts: dict) -> None:
    """`torch.cuda` as the kernel saw it, for code that asks before placing tensors."""
    n = int(facts.get("count") or 1)
    names = list(facts.get("names") or ["cuda"])
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: n
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda i=0: names[int(i) if isinstance(i, int) else 0] if names else "cuda"
    cuda.is_current_stream_capturing = lambda: False  # optimizers ask before each step (Adam, AdamW)
    for fn in ("synchronize", "empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated", "set_device",
               "ipc_collect"):
        setattr(cuda, fn, lambda *a, **k: None)
    for fn in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(cuda, fn, lambda *a, **k: 0)


def _cpu_sources(torch: Any) -> None:
    """Tensors made from host memory without passing torch's function dispatch are on the CPU."""
    for name in ("from_numpy", "frombuffer", "from_dlpack"):
        real = getattr(torch, name, None)
        if real is None:
            continue

        def made_on_cpu(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            out = _real(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.device.type == "cpu" and TAG not in out.__dict__:
                out.__dict__[TAG] = "cpu"
            return out

        made_on_cpu.__name__ = made_on_cpu.__qualname__ = name
        made_on_cpu.__doc__ = real.__doc__
        setattr(torch, name, made_on_cpu)


def map_devices(facts: dict, force: bool) -> bool:
    """Enter the virtual-device mode where the kernel's torch had a GPU (or `force`). True when it did."""
    torch = sys.modules.get("torch")
    if torch is None or not (force or facts.get("cuda")):
        return False
    _cpu_sources(torch)
    _mode_class(torch)().__enter__()
    _stand_in_cuda(torch, facts)
    _SETUP["devices_mapped"] = True
    return True

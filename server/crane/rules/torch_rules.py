"""torch misuse rules: input tensors that do not fit the first layer of an nn.Sequential / a bare layer
(a device other than the module's parameters' when both are known),
(Linear in_features, an input dtype other than the module's parameter dtype into Linear — integer tensors, or
float64 from `torch.from_numpy` into float32 weights —, Conv channels and rank), and loss targets of the wrong dtype
or shape (CrossEntropyLoss/NLLLoss need Long class indices, BCE losses need float targets of the input's size).

Only modules whose first applied layer is known are judged: a bare layer, or an nn.Sequential whose first
leaf sits on a path of indexed children (Sequential inside Sequential), so registration order is call order.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import Facts, LayerFacts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, qualname, value
from crane.rulekit.lib_helpers import Verdict, describe, is_tensor, shape_of
from crane.rulekit.registry import rule

_TORCH_DTYPES = {"torch.int64": "Long", "torch.int32": "Int", "torch.int16": "Short", "torch.int8": "Char",
                 "torch.uint8": "Byte", "torch.bool": "Bool", "torch.float32": "Float", "torch.float64": "Double",
                 "torch.float16": "Half", "torch.bfloat16": "BFloat16"}
_INTEGER = {"torch.int64", "torch.int32", "torch.int16", "torch.int8", "torch.uint8", "torch.bool"}
_FLOATING = {"torch.float32", "torch.float64", "torch.float16", "torch.bfloat16"}
_CONV_DIMS = {"Conv1d": 1, "Conv2d": 2, "Conv3d": 3}


def first_layer(module: Facts) -> LayerFacts | None:
    """The layer a call of this module applies first, when certain."""
    tm = module.torch_module
    if tm is None or not tm.layers:
        return None
    short = module.type.rsplit(".", 1)[-1]
    first = tm.layers[0]
    if short == "Sequential":
        if not all(part.isdigit() for part in first.name.split(".")):
            return None
        return first
    if len(tm.layers) == 1 and first.name == "(root)" and first.type == short:
        return first
    return None


def device_mismatch(module_device: str | None, x_device: str | None) -> tuple[str, str] | None:
    """(module device, input device) when both are known, real and different ("cuda" means "cuda:0")."""
    if not module_device or not x_device or "meta" in (module_device, x_device):
        return None

    def norm(d: str) -> str:
        return d if ":" in d or d == "cpu" else d + ":0"

    a, b = norm(module_device), norm(x_device)
    return (a, b) if a != b else None


def input_verdict(mlabel: str, module: Facts, xlabel: str, x: Facts) -> Verdict | None:
    layer = first_layer(module)
    shp = shape_of(x)
    if layer is None or shp is None or not is_tensor(x) or not x.type.startswith("torch."):
        return None  # (jax arrays and TF tensors are kind "tensor" too: torch rejects them otherwise)
    ev = [f"{mlabel}: {module.type.rsplit('.', 1)[-1]}, first layer {layer.type}"
          + (f"(in_features={layer.in_features}, out_features={layer.out_features})" if layer.type == "Linear" else
             f"(in_channels={layer.in_channels}, out_channels={layer.out_channels})"),
          describe(xlabel, x)]
    tm = module.torch_module
    weights = tm.dtype if tm is not None else None
    dev = device_mismatch(tm.device if tm is not None else None, x.device)
    if dev is not None:
        return Verdict("RuntimeError", f"Expected all tensors to be on the same device, but found at least two "
                       f"devices, {dev[0]} and {dev[1]}!", "implementation error",
                       ev + [f"{mlabel}'s parameters are on {dev[0]}, {xlabel} is on {dev[1]}"], 0.85)
    if layer.type == "Linear" and layer.in_features is not None and layer.out_features is not None and shp:
        if tm is not None and tm.mixed_dtypes:
            return None  # which dtype the first layer holds is not known
        if weights is not None:
            ev.append(f"{mlabel}'s parameters are {weights}")
        if x.dtype in _INTEGER:
            return Verdict("RuntimeError", f"mat1 and mat2 must have the same dtype, but got "
                           f"{_TORCH_DTYPES.get(x.dtype, x.dtype)} and {_TORCH_DTYPES.get(weights or '', 'Float')}",
                           "implementation error", ev, 0.85)
        if weights in _FLOATING and x.dtype in _FLOATING and x.dtype != weights:
            return Verdict("RuntimeError", f"mat1 and mat2 must have the same dtype, but got "
                           f"{_TORCH_DTYPES[x.dtype]} and {_TORCH_DTYPES[weights]}", "implementation error", ev, 0.85)
        if shp[-1] != layer.in_features:
            rows = math.prod(shp[:-1]) if len(shp) > 1 else 1
            return Verdict("RuntimeError", f"mat1 and mat2 shapes cannot be multiplied ({rows}x{shp[-1]} and "
                           f"{layer.in_features}x{layer.out_features})", "implementation error", ev, 0.9)
        return None
    dims = _CONV_DIMS.get(layer.type)
    if dims is not None and layer.in_channels is not None:
        if len(shp) not in (dims + 1, dims + 2):
            return Verdict("RuntimeError", f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to "
                           f"conv{dims}d, but got input of size: [{', '.join(str(d) for d in shp)}]",
                           "implementation error", ev, 0.9)
        channels = shp[1] if len(shp) == dims + 2 else shp[0]
        if channels != layer.in_channels:
            shown = list(shp) if len(shp) == dims + 2 else [1] + list(shp)
            return Verdict("RuntimeError", f"expected input[{', '.join(str(d) for d in shown)}] to have "
                           f"{layer.in_channels} channels, but got {channels} channels instead",
                           "implementation error", ev, 0.9)
    return None


LOSSES = {"CrossEntropyLoss": "ce", "NLLLoss": "nll", "BCELoss": "bce", "BCEWithLogitsLoss": "bcel",
          "cross_entropy": "ce", "nll_loss": "nll", "binary_cross_entropy": "bce",
          "binary_cross_entropy_with_logits": "bcel"}


def loss_verdict(loss: str, inp: Facts | None, target: Facts, tlabel: str, ilabel: str) -> Verdict | None:
    kind = LOSSES.get(loss)
    if kind is None or not is_tensor(target) or not target.dtype or not target.type.startswith("torch."):
        return None
    ev = [describe(tlabel, target)] + ([describe(ilabel, inp)] if inp is not None else [])
    tshape = shape_of(target)
    ishape = shape_of(inp) if inp is not None and is_tensor(inp) else None
    tname = _TORCH_DTYPES.get(target.dtype, target.dtype)
    if kind in ("ce", "nll"):
        if target.dtype in ("torch.int64", "torch.uint8"):
            return None
        same_rank = ishape is not None and tshape is not None and len(ishape) == len(tshape)
        if target.dtype in _INTEGER:
            if kind == "ce" and same_rank:
                return Verdict("RuntimeError", "Expected floating point type for target with class probabilities, "
                               f"got {tname}", "ML model confusion", ev, 0.85)
            return Verdict("RuntimeError", f"expected target dtype to be Long or Byte, but got {tname}",
                           "ML model confusion", ev, 0.85)
        differ = ishape is not None and tshape is not None and len(ishape) != len(tshape)
        if kind == "nll" or differ:  # class indices expected
            return Verdict("RuntimeError", f"expected target dtype to be Long or Byte, but got {tname}",
                           "ML model confusion", ev, 0.85)
        return None
    if target.dtype in _INTEGER:
        msg = (f"Found dtype {tname} but expected Float" if kind == "bce"
               else f"result type Float can't be cast to the desired output type {tname}")
        return Verdict("RuntimeError", msg, "ML model confusion", ev, 0.85)
    if ishape is not None and tshape is not None and ishape != tshape:
        ts, is_ = f"torch.Size([{', '.join(map(str, tshape))}])", f"torch.Size([{', '.join(map(str, ishape))}])"
        msg = (f"Using a target size ({ts}) that is different to the input size ({is_}) is deprecated. Please ensure "
               f"they have the same size." if kind == "bce" else
               f"Target size ({ts}) must be the same as input size ({is_})")
        return Verdict("ValueError", msg, "ML model confusion", ev, 0.9)
    return None


def _under_autocast(ctx, node: ast.AST) -> bool:
    cur = ctx.parent(node)
    while cur is not None:
        if isinstance(cur, (ast.With, ast.AsyncWith)):
            if any("autocast" in ctx.text(item.context_expr) or "amp" in ctx.text(item.context_expr)
                   for item in cur.items):
                return True
        cur = ctx.parent(cur)
    return False


@rule("torch-shapes", needs_probe=True)
def torch_shapes(ctx: RuleContext) -> Iterator[Finding]:
    """Tensors that do not fit a module's first layer; loss targets of the wrong dtype or shape."""
    for call in ctx.calls():
        if not ctx.is_certain(call) or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        if _under_autocast(ctx, call):
            continue  # autocast changes the dtypes layers compute in
        v = None
        func = call.func
        callee = value(ctx, func) if isinstance(func, ast.Name) else None
        if (isinstance(func, ast.Name) and callee is not None and callee.kind == "torch_module"
                and callee.type.startswith("torch.nn.")):
            short = callee.type.rsplit(".", 1)[-1]
            if short in LOSSES and len(call.args) == 2:
                v = loss_verdict(short, value(ctx, call.args[0]), value(ctx, call.args[1]) or Facts(name="", type=""),
                                 label(ctx, call.args[1]), label(ctx, call.args[0]))
            elif len(call.args) == 1:
                x = value(ctx, call.args[0])
                if x is not None:
                    v = input_verdict(func.id, callee, label(ctx, call.args[0]), x)
        else:
            q = qualname(ctx, func) or ""
            if q.startswith("torch.nn.functional.") and len(call.args) == 2:
                short = q.rsplit(".", 1)[-1]
                if short in LOSSES:
                    target = value(ctx, call.args[1])
                    if target is not None:
                        v = loss_verdict(short, value(ctx, call.args[0]), target, label(ctx, call.args[1]),
                                         label(ctx, call.args[0]))
        if v is not None:
            yield emit(ctx, call, "torch-shapes", v)
            return

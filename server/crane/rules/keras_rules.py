"""Keras 3 rules: data that does not fit a model's inputs, labels that do not fit its loss, training before
`compile()`.

Written from Keras 3.15's own checks: `Functional._adjust_input_rank` (an input one rank short of the `Input`
is accepted when the Input's last axis is 1, one rank long when the data's last axis is 1; any other rank raises
"Invalid input shape ... Expected shape ..., but input has incompatible shape ..."), the TensorFlow backend's
`categorical_crossentropy` (the target, expanded to rank 2 by `squeeze_or_expand_to_same_rank`, must have the
output's shape) and `Trainer._assert_compile_called` (fit/evaluate/train_on_batch/test_on_batch before compile).
Only models whose input and output shapes the probe read (built Sequential/functional models with one input and
one output) are judged; subclassed models and datasets/generators as x are not.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import Facts, KerasModelFacts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, library_version, method_calls, state_may_change, value
from crane.rulekit.lib_helpers import Verdict, describe, is_array_like, is_series, is_tensor, shape_of
from crane.rulekit.registry import rule

_INPUT_METHODS = {"fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch"}
_LABEL_METHODS = {"fit", "evaluate", "train_on_batch", "test_on_batch"}
_COMPILE_METHODS = {"fit", "evaluate", "train_on_batch", "test_on_batch"}
_CATEGORICAL = {
    "categorical_crossentropy",
    "CategoricalCrossentropy",
    "categorical_focal_crossentropy",
    "CategoricalFocalCrossentropy",
}
_SPARSE = {"sparse_categorical_crossentropy", "SparseCategoricalCrossentropy"}


def _keras(f: Facts | None) -> KerasModelFacts | None:
    return f.keras_model if f is not None and f.kind == "keras_model" else None


def _shape_text(dims: list[int] | tuple[int, ...], batch_none: bool = True) -> str:
    parts = ["None" if (d < 0 or (i == 0 and batch_none)) else str(d) for i, d in enumerate(dims)]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _data_shape(x: Facts | None) -> tuple[int, ...] | None:
    if x is None or not (is_array_like(x) or is_tensor(x)):
        return None
    return shape_of(x)


def dataset_x_shape(x: Facts) -> tuple[int | None, ...] | None:
    """The shape of the inputs a tf.data pipeline yields, from its element_spec: a lone TensorSpec or the first of
    an (x, y[, w]) tuple; the first axis is None when it batches. Keras feeds an element as a batch."""
    spec = (x.element_spec or "").strip()
    if not spec.startswith(("TensorSpec(", "(TensorSpec(")):
        return None
    m = _SPEC_SHAPE.search(spec)
    if m is None:
        return None
    dims: list[int | None] = []
    for part in (p.strip() for p in m.group(1).split(",")):
        if not part:
            continue
        if part == "None":
            dims.append(None)
        elif part.isdigit():
            dims.append(int(part))
        else:
            return None
    return tuple(dims) if dims else None


_SPEC_SHAPE = re.compile(r"TensorSpec\(shape=\(([^)]*)\)")


def input_verdict(km: KerasModelFacts, mname: str, xlabel: str, x: Facts, where: str) -> Verdict | None:
    """Keras 3's input-rank adjustment and shape check of a one-input model, for data of a known shape (arrays,
    tensors, or a tf.data Dataset's element_spec)."""
    if not km.inputs or len(km.inputs) != 1:
        return None
    ref = km.inputs[0]
    spec = dataset_x_shape(x) if x.element_spec else None
    shp: tuple[int | None, ...] | None = spec if spec is not None else _data_shape(x)
    if shp is None or len(shp) < 1:
        return None
    ev = [f"{mname}: Keras model, input shape {_shape_text(ref)}", describe(xlabel, x)]
    if spec is not None:
        ev[1] = f"{xlabel}: tf.data Dataset, element_spec {x.element_spec}"
    seen = shp if spec is not None else (None, *shp[1:])
    seen_text = "(" + ", ".join("None" if d is None else str(d) for d in seen) + ("," if len(seen) == 1 else "") + ")"
    xr, rr = len(shp), len(ref)
    adjusted: tuple[int | None, ...] | None = None
    if xr == rr:
        adjusted = shp
    elif xr == rr + 1 and shp[-1] == 1:
        adjusted = shp[:-1]
    elif xr == rr - 1 and ref[-1] == 1:
        adjusted = (*shp, 1)
    if adjusted is None:
        return Verdict(
            "ValueError",
            f"Invalid input shape for input {where}. Expected shape {_shape_text(ref)}, "
            f"but input has incompatible shape {seen_text}",
            "data confusion",
            ev,
            0.9,
        )
    for i, (a, r) in enumerate(zip(adjusted[1:], ref[1:], strict=False), start=1):
        if r >= 0 and a is not None and a != r:
            return Verdict(
                "ValueError",
                f"Input 0 of the model is incompatible: expected axis {i} of input shape "
                f"to have value {r}, but received input with shape {seen_text} (expected "
                f"{_shape_text(ref)})",
                "data confusion",
                ev,
                0.85,
            )
    return None


def _loss_name(km: KerasModelFacts) -> str | None:
    if km.losses and len(km.losses) == 1:
        return km.losses[0]
    return None


def label_verdict(km: KerasModelFacts, ylabel: str, y: Facts, batch: int) -> Verdict | None:
    loss = _loss_name(km)
    if loss is None or not km.outputs or len(km.outputs) != 1:
        return None
    out = km.outputs[0]
    yshape = _data_shape(y)
    if yshape is None or len(out) != 2 or out[1] < 0:
        return None
    units = out[1]
    b = min(batch, yshape[0]) if yshape[0] > 0 else batch
    ev = [f"the model's output shape is {_shape_text(out)} and its loss is {loss!r}", describe(ylabel, y)]
    if loss in _CATEGORICAL:
        if len(yshape) == 1:
            target = (b, 1)
        elif len(yshape) == 2:
            target = (b, yshape[1])
        else:
            return None
        if target[1] != units:
            return Verdict(
                "ValueError",
                f"Arguments `target` and `output` must have the same shape. Received: "
                f"target.shape={target}, output.shape={(b, units)}",
                "ML model confusion",
                ev
                + [
                    "categorical_crossentropy expects one-hot labels of the output's width; integer "
                    "class ids need sparse_categorical_crossentropy"
                ],
                0.9,
            )
        return None
    if loss in _SPARSE and km.from_logits is not True:
        rng = y.value_range
        if (
            rng is None
            or y.sampled
            or not y.dtype
            or not y.dtype.startswith(("int", "uint"))
            or len(yshape) != 1
            or units < 1
        ):
            return None
        hi = rng[1]
        if isinstance(hi, int) and hi >= units:
            return Verdict(
                "InvalidArgumentError",
                f"Received a label value of {hi} which is outside the valid range of [0, {units})",
                "ML model confusion",
                ev,
                0.8,
            )
    return None


def label_dtype_verdict(ylabel: str, y: Facts) -> Verdict | None:
    """Keras 3's data adapters read a pandas Series' dtype (and a numpy text array's) through
    `backend.standardize_dtype`, which rejects text and categories: "Invalid dtype: str" before any batch."""
    name = None
    if is_series(y) and y.dtype in ("str", "object", "category"):
        name = y.dtype
    elif y.kind == "ndarray" and y.dtype:
        m = re.fullmatch(r"<U(\d+)", y.dtype)
        if m:
            name = f"str{32 * int(m.group(1))}"  # numpy's dtype.name: bits
    if name is None:
        return None
    return Verdict("ValueError", f"Invalid dtype: {name}", "data confusion",
                   [describe(ylabel, y) + (f", e.g. {y.example_values[0]}" if y.example_values else ""),
                    "Keras models train on numbers: encode text labels (LabelEncoder, StringLookup) first"], 0.9)


def _x_arg(call: ast.Call) -> ast.expr | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return RuleContext.kwarg(call, "x")


def _y_arg(call: ast.Call) -> ast.expr | None:
    if len(call.args) > 1 and not isinstance(call.args[1], ast.Starred):
        return call.args[1]
    return RuleContext.kwarg(call, "y")


def save_verdict(ctx: RuleContext, call: ast.Call, name: str) -> Verdict | None:
    """Keras 3 `saving_api.save_model`: a path without a .keras/.h5/.hdf5 extension is rejected (no SavedModel)."""
    if _keras(ctx.facts(name)) is None or not ctx.is_live(name, call):
        return None
    if any(k.arg in (None, "zipped", "save_format") for k in call.keywords) or len(call.args) != 1:
        return None
    path = ctx.literal(call.args[0], None)
    if not isinstance(path, str) or path.startswith("hf://") or path.endswith((".keras", ".h5", ".hdf5")):
        return None
    return Verdict(
        "ValueError",
        "Invalid filepath extension for saving. Please add either a `.keras` extension for "
        "the native Keras format (recommended) or a `.h5` extension. Use `model.export(filepath)` if you "
        f"want to export a SavedModel for use with TFLite/TFServing/etc. Received: filepath={path}.",
        "library cause",
        [
            f"{name}: Keras model; keras {library_version(ctx, 'keras')} saves only "
            ".keras or .h5 files (Keras 2's SavedModel directories are gone)"
        ],
        0.9,
    )


@rule("keras-model", needs_probe=True)
def keras_model(ctx: RuleContext) -> Iterator[Finding]:
    """fit/evaluate/predict inputs against a Keras model's input, labels against its loss, fit before compile."""
    keras3 = (library_version(ctx, "keras") or "").startswith("3.")
    for call, recv, meth in method_calls(ctx):
        if meth == "save" and keras3 and isinstance(recv, ast.Name) and ctx.is_certain(call):
            v = save_verdict(ctx, call, recv.id)
            if v is not None:
                yield emit(ctx, call, "keras-model", v)
                return
        if meth not in _INPUT_METHODS or not isinstance(recv, ast.Name) or not ctx.is_certain(call):
            continue
        km = _keras(ctx.facts(recv.id))
        if km is None or not ctx.is_live(recv.id, call):
            continue
        changed = state_may_change(ctx, recv.id, call)
        if meth in _COMPILE_METHODS and km.compiled is False and not changed:
            yield emit(
                ctx,
                call,
                "keras-model",
                Verdict(
                    "ValueError",
                    "You must call `compile()` before using the model.",
                    "API misuse",
                    [f"{recv.id}: Keras model, not compiled (probe)"],
                    0.9,
                ),
            )
            return
        if changed:
            continue
        x_node = _x_arg(call)
        x = value(ctx, x_node)
        if x_node is not None and x is not None:
            v = input_verdict(km, recv.id, label(ctx, x_node), x, label(ctx, x_node))
            if v is not None:
                yield emit(ctx, call, "keras-model", v)
                return
        if meth == "fit":
            vd = ctx.kwarg(call, "validation_data")
            if isinstance(vd, (ast.Tuple, ast.List)) and vd.elts:
                vx = value(ctx, vd.elts[0])
                if vx is not None:
                    v = input_verdict(km, recv.id, label(ctx, vd.elts[0]), vx, label(ctx, vd.elts[0]))
                    if v is not None:
                        v.evidence.append("validation_data is checked at the end of the first epoch")
                        yield emit(ctx, call, "keras-model", v)
                        return
        if meth in _LABEL_METHODS:
            y_node = _y_arg(call)
            y = value(ctx, y_node)
            if y_node is not None and y is not None and keras3 and meth in ("fit", "evaluate"):
                v = label_dtype_verdict(label(ctx, y_node), y)
                if v is not None:
                    yield emit(ctx, call, "keras-model", v)
                    return
            if y_node is not None and y is not None:
                bs = ctx.literal(ctx.kwarg(call, "batch_size"), 32)
                v = label_verdict(km, label(ctx, y_node), y, bs if isinstance(bs, int) and bs > 0 else 32)
                if v is not None:
                    yield emit(ctx, call, "keras-model", v)
                    return

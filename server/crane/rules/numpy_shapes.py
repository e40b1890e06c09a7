"""numpy (and torch tensor) shape rules: element-wise operations on shapes that do not broadcast, np.dot /
matmul / `@` with misaligned inner dimensions, reshape to a different size, and literal indices past the end
of an axis (arrays, lists, `.iloc`).

Only exact shapes decide (kernel facts, or shapes the flow evaluator derived exactly); pandas objects that
align on their index (Series op Series, DataFrame ops) are not judged.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from crane.finding import Finding
from crane.probe.facts import Facts
from crane.rulekit.context import RuleContext
from crane.rulekit.lib_glue import emit, label, qualname, value
from crane.rulekit.lib_helpers import NOVALUE, Verdict, describe, is_ndarray, is_series, is_tensor, literal, shape_of
from crane.rulekit.registry import rule

Shape = tuple[int, ...]


def broadcast(a: Shape, b: Shape) -> bool:
    """numpy/torch broadcasting: trailing dimensions equal or one of them 1."""
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y and x != 1 and y != 1:
            return False
    return True


def _np_shape(shape: Shape) -> str:
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def first_mismatch(a: Shape, b: Shape) -> int | None:
    """The non-singleton dimension (counted from the front of the longer shape, as torch reports) that fails."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    for i in range(n - 1, -1, -1):
        if pa[i] != pb[i] and pa[i] != 1 and pb[i] != 1:
            return i
    return None


def tensor_lib(f: Facts) -> str:
    """The library of a `tensor` fact: "torch", "jax" or "tensorflow" (their shape errors differ)."""
    if f.type.startswith(("jaxlib.", "jax.")):
        return "jax"
    if f.type.startswith("tensorflow."):
        return "tensorflow"
    return "torch"


def _tf_dims(s: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in s) + "]"


def broadcast_verdict(la: str, fa: Facts, lb: str, fb: Facts) -> Verdict | None:
    """`a <op> b` for arrays/tensors whose exact shapes do not broadcast."""
    tensors = is_tensor(fa) and is_tensor(fb)
    if tensors and tensor_lib(fa) != tensor_lib(fb):
        return None  # mixing libraries: each converts differently
    arrays = (is_ndarray(fa) and is_ndarray(fb)) or (is_ndarray(fa) and is_series(fb)) or (
        is_series(fa) and is_ndarray(fb))
    if not (tensors or arrays):
        return None
    a, b = shape_of(fa), shape_of(fb)
    if a is None or b is None or broadcast(a, b):
        return None
    if (is_series(fa) or is_series(fb)) and (len(a) != 1 or len(b) != 1):
        return None  # Series with a 2-D array: pandas raises its own, different errors
    ev = [describe(la, fa), describe(lb, fb)]
    if tensors and tensor_lib(fa) == "jax":
        return Verdict("ValueError", f"Incompatible shapes for broadcasting: shapes=[{a}, {b}]",
                       "implementation error", ev, 0.9)
    if tensors and tensor_lib(fa) == "tensorflow":
        return Verdict("InvalidArgumentError", f"Incompatible shapes: {_tf_dims(a)} vs. {_tf_dims(b)}",
                       "implementation error", ev, 0.85)
    if tensors and (dim := first_mismatch(a, b)) is not None:  # always, as a and b do not broadcast
        n = max(len(a), len(b))
        pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
        return Verdict("RuntimeError", f"The size of tensor a ({pa[dim]}) must match the size of tensor b "
                       f"({pb[dim]}) at non-singleton dimension {dim}", "implementation error", ev, 0.9)
    return Verdict("ValueError", f"operands could not be broadcast together with shapes {_np_shape(a)} "
                   f"{_np_shape(b)} ", "implementation error", ev, 0.9)


def dot_verdict(la: str, fa: Facts, lb: str, fb: Facts, op: str) -> Verdict | None:
    """np.dot(a, b) (op 'dot'), a @ b / np.matmul (op 'matmul') for numpy arrays; torch 2-D matmul."""
    a, b = shape_of(fa), shape_of(fb)
    if a is None or b is None or not a or not b:
        return None
    ev = [describe(la, fa), describe(lb, fb)]
    if is_tensor(fa) and is_tensor(fb):
        lib = tensor_lib(fa)
        if lib != tensor_lib(fb) or op != "matmul" or len(a) != 2 or len(b) != 2 or a[1] == b[0]:
            return None
        if lib == "jax":
            return Verdict("TypeError", f"dot_general requires contracting dimensions to have the same shape, got "
                           f"({a[1]},) and ({b[0]},).", "implementation error", ev, 0.9)
        if lib == "tensorflow":
            return Verdict("InvalidArgumentError", f"Matrix size-incompatible: In[0]: {_tf_dims(a)}, In[1]: "
                           f"{_tf_dims(b)} [Op:MatMul]", "implementation error", ev, 0.85)
        if op == "matmul" and len(a) == 2 and len(b) == 2 and a[1] != b[0]:
            return Verdict("RuntimeError", f"mat1 and mat2 shapes cannot be multiplied ({a[0]}x{a[1]} and "
                           f"{b[0]}x{b[1]})", "implementation error", ev, 0.9)
        return None
    if not (is_ndarray(fa) and is_ndarray(fb)):
        return None
    if op == "dot":
        ia = len(a) - 1
        ib = 0 if len(b) == 1 else len(b) - 2
        if a[ia] != b[ib]:
            return Verdict("ValueError", f"shapes {_np_shape(a)} and {_np_shape(b)} not aligned: {a[ia]} (dim {ia}) "
                           f"!= {b[ib]} (dim {ib})", "implementation error", ev, 0.9)
        return None
    if len(a) > 2 or len(b) > 2:
        return None  # batched matmul: not judged
    k_a = a[-1]
    k_b = b[0] if len(b) == 1 else b[-2]
    if k_a != k_b:
        return Verdict("ValueError", f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                       f"signature (n?,k),(k,m?)->(n?,m?) (size {k_b} is different from {k_a})",
                       "implementation error", ev, 0.9)
    return None


def reshape_verdict(lbl: str, f: Facts, shape: list) -> Verdict | None:
    size_shape = shape_of(f)
    if size_shape is None or not (is_ndarray(f) or is_tensor(f)):
        return None
    if not shape or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return None
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        return None
    total = math.prod(size_shape)
    known = math.prod(d for d in shape if d != -1)
    ok = (total % known == 0) if (-1 in shape and known) else (math.prod(shape) == total)
    if -1 in shape and known == 0:
        return None
    if ok:
        return None
    ev = [describe(lbl, f)]
    if is_tensor(f) and tensor_lib(f) == "jax":
        return Verdict("TypeError", f"cannot reshape array of shape {size_shape} (size {total}) into shape "
                       f"{tuple(shape)} (size {math.prod(shape)})" if -1 not in shape else
                       f"cannot reshape array of shape {size_shape} (size {total}) into shape {tuple(shape)}",
                       "implementation error", ev, 0.9)
    if is_tensor(f) and tensor_lib(f) == "tensorflow":
        return None  # TF tensors have no reshape method (tf.reshape is a function)
    if is_tensor(f):
        return Verdict("RuntimeError", f"shape '[{', '.join(str(d) for d in shape)}]' is invalid for input of size "
                       f"{total}", "implementation error", ev, 0.9)
    return Verdict("ValueError", f"cannot reshape array of size {total} into shape {_np_shape(tuple(shape))}",
                   "implementation error", ev, 0.9)


def index_verdict(lbl: str, f: Facts, index) -> Verdict | None:
    """Literal integer indices past the end of an ndarray axis / a list or tuple."""
    if f.kind in ("list", "tuple") and f.length is not None and not f.truncated:
        if isinstance(index, int) and not isinstance(index, bool) and not -f.length <= index < f.length:
            return Verdict("IndexError", f"{f.kind} index out of range", "implementation error",
                           [f"{lbl}: {f.kind} of length {f.length}"], 0.9)
        return None
    if not is_ndarray(f):
        return None
    shp = shape_of(f)
    if shp is None:
        return None
    items = index if isinstance(index, tuple) else (index,)
    if any(i is Ellipsis or i is None for i in items) or len(items) > len(shp):
        return None
    for axis, i in enumerate(items):
        if isinstance(i, bool) or not isinstance(i, int):
            continue
        if not -shp[axis] <= i < shp[axis]:
            return Verdict("IndexError", f"index {i} is out of bounds for axis {axis} with size {shp[axis]}",
                           "implementation error", [describe(lbl, f)], 0.9)
    return None


def _slice_literal(node: ast.AST):
    """A subscript's index with slices as `slice` objects (literal parts only), or NOVALUE."""
    if isinstance(node, ast.Tuple):
        parts = [_slice_literal(e) for e in node.elts]
        return NOVALUE if any(p is NOVALUE for p in parts) else tuple(parts)
    if isinstance(node, ast.Slice):
        return slice(None)
    v = literal(node)
    return v


_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


@rule("numpy-shapes", needs_probe=True)
def shapes(ctx: RuleContext) -> Iterator[Finding]:
    """Broadcast, dot/matmul, reshape and index errors between exactly known shapes."""
    for node in ctx.nodes(ast.BinOp, ast.AugAssign, ast.Call, ast.Subscript):
        if not ctx.is_certain(node):
            continue
        v = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ELEMENTWISE + (ast.MatMult,)):
            fa, fb = value(ctx, node.left), value(ctx, node.right)
            if fa is None or fb is None:
                continue
            la, lb = label(ctx, node.left), label(ctx, node.right)
            if isinstance(node.op, ast.MatMult):
                v = dot_verdict(la, fa, lb, fb, "matmul")
            else:
                v = broadcast_verdict(la, fa, lb, fb)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _ELEMENTWISE):
            fa, fb = value(ctx, node.target), value(ctx, node.value)
            if fa is None or fb is None:
                continue
            v = broadcast_verdict(label(ctx, node.target), fa, label(ctx, node.value), fb)
            a, b = shape_of(fa), shape_of(fb)
            if v is None and a is not None and b is not None and is_ndarray(fa) and is_ndarray(fb):
                n = max(len(a), len(b))
                if broadcast(a, b) and ((1,) * (n - len(a)) + a) != tuple(
                        max(x, y) for x, y in zip((1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b, strict=False)):
                    v = Verdict("ValueError", f"non-broadcastable output operand with shape {_np_shape(a)} doesn't "
                                f"match the broadcast shape", "implementation error",
                                [describe(label(ctx, node.target), fa), describe(label(ctx, node.value), fb)], 0.85)
        elif isinstance(node, ast.Call):
            if any(isinstance(a, ast.Starred) for a in node.args) or node.keywords:
                continue
            q = qualname(ctx, node.func) or ""
            if q in ("numpy.dot", "numpy.matmul", "torch.matmul", "torch.mm") and len(node.args) == 2:
                fa, fb = value(ctx, node.args[0]), value(ctx, node.args[1])
                if fa is not None and fb is not None:
                    op = "dot" if q == "numpy.dot" else "matmul"
                    v = dot_verdict(label(ctx, node.args[0]), fa, label(ctx, node.args[1]), fb, op)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ("dot", "reshape", "view"):
                recv = value(ctx, node.func.value)
                if recv is None:
                    continue
                if node.func.attr == "dot" and len(node.args) == 1 and is_ndarray(recv):
                    fb = value(ctx, node.args[0])
                    if fb is not None:
                        v = dot_verdict(label(ctx, node.func.value), recv, label(ctx, node.args[0]), fb, "dot")
                elif node.func.attr in ("reshape", "view") and node.args:
                    if node.func.attr == "view" and not is_tensor(recv):
                        continue
                    args = [literal(a) for a in node.args]
                    if any(a is NOVALUE for a in args):
                        continue
                    shape = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
                    if len(args) == 1 and isinstance(args[0], int):
                        shape = [args[0]]
                    v = reshape_verdict(label(ctx, node.func.value), recv, shape)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            idx = _slice_literal(node.slice)
            if idx is NOVALUE:
                continue
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr == "iloc":
                f = value(ctx, base.value)
                if f is not None and (is_series(f) or f.kind == "dataframe") and isinstance(idx, int) \
                        and not isinstance(idx, bool) and not f.truncated:
                    n_rows = f.length if f.length is not None else (shape_of(f) or (None,))[0]
                    if n_rows is not None and not -n_rows <= idx < n_rows:
                        v = Verdict("IndexError", "single positional indexer is out-of-bounds",
                                    "implementation error", [describe(label(ctx, base.value), f)], 0.9)
            else:
                f = value(ctx, base)
                if f is not None:
                    v = index_verdict(label(ctx, base), f, idx)
        if v is not None:
            yield emit(ctx, node, "numpy-shapes", v)
            return

"""Candidates for torch shape and dtype errors.

- `flatten-input`: "mat1 and mat2 shapes cannot be multiplied (AxB and CxD)" calling a module on a tensor of
  rank > 2 → `x.flatten(1)` (one row per sample), when B·(the other dims) is what the Linear expects (C).
- `linear-in-features`: the same error where the `nn.Linear(C, ...)` is built in the cell → `nn.Linear(B, ...)`.
- `target-long` / `target-float` / `target-1d` / `input-float`: a loss whose target has the wrong dtype
  ("expected target dtype to be Long or Byte, but got Float", "Found dtype Long but expected Float") →
  `target.long()` (class indices) or `target.float()` (BCE targets); a (N, 1) class-index target ("0D or 1D
  target tensor expected") → `target.view(-1)`; "mat1 and mat2 must have the same dtype" → the input
  `.float()`.
"""

from __future__ import annotations

import ast
import math
import re

from crane.fixes.context import FixContext

_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_LONG = re.compile(r"expected target dtype to be Long|expected scalar type Long|Expected object of scalar type "
                   r"Long|not implemented for 'Int'")
_ONE_D = re.compile(r"0D or 1D target tensor expected")
_FLOAT = re.compile(r"Found dtype (Long|Int|Double) but expected Float|result type Float can't be cast to the "
                    r"desired output type Long")
_SAME = re.compile(r"mat1 and mat2 must have the same dtype|expected (mat1 and mat2|both) .*same dtype|"
                   r"Input type \(\w+\) and weight type")


def _calls(ctx: FixContext) -> list[ast.Call]:
    return [c for c in ctx.crash_nodes(ast.Call) if isinstance(c, ast.Call)]


def linear_input(ctx: FixContext):
    m = _MATMUL.search(ctx.crash.evalue) if ctx.crash.ename == "RuntimeError" else None
    if m is None:
        return
    rows, got, expected = int(m.group(1)), int(m.group(2)), int(m.group(3))
    for call in _calls(ctx):
        if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Name):
            continue
        x = call.args[0].id
        f = ctx.facts(x)
        shape = f.shape if f is not None and f.kind == "tensor" else None
        if shape and len(shape) > 2 and math.prod(shape[1:]) == expected:
            ed = ctx.editor()
            try:
                new = ed.replace(call.args[0], f"{x}.flatten(1)").apply()
            except ValueError:
                continue
            yield ctx.candidate("flatten-input", f"Flatten {x} to one row per sample", new,
                                detail=f"{x} has shape {tuple(shape)}; the layer expects {expected} features")
    for node in ctx.all_nodes(ast.Call):
        if not (isinstance(node, ast.Call) and ctx.text(node.func).split(".")[-1] == "Linear" and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value == expected and got != expected:
            ed = ctx.editor()
            try:
                new = ed.replace(first, str(got)).apply()
            except ValueError:
                continue
            yield ctx.candidate("linear-in-features", f"Make the Linear layer take {got} features", new, penalty=2.0,
                                detail=f"the input has {got} features per row ({rows} rows); the layer expects "
                                       f"{expected}")


def loss_dtype(ctx: FixContext):
    if ctx.crash.ename != "RuntimeError":
        return
    text = ctx.crash.evalue
    if _FLOAT.search(text):
        suffix, kind, what = ".float()", "target-float", "a Float target"
    elif _LONG.search(text):
        suffix, kind, what = ".long()", "target-long", "a Long (class index) target"
    elif _ONE_D.search(text):
        suffix, kind, what = ".view(-1)", "target-1d", "a 1-D target"
    elif _SAME.search(text):
        yield from _input_float(ctx)
        return
    else:
        return
    for call in _calls(ctx):
        if len(call.args) < 2:
            continue
        target = call.args[1]
        t = ctx.text(target)
        simple = isinstance(target, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
        ed = ctx.editor()
        try:
            new = ed.replace(target, f"{t}{suffix}" if simple else f"({t}){suffix}").apply()
        except ValueError:
            continue
        yield ctx.candidate(kind, f"Pass the target as {t}{suffix}", new, detail=f"the loss wants {what}")
        return


def _input_float(ctx: FixContext):
    for call in _calls(ctx):
        if len(call.args) != 1 or not isinstance(call.args[0], (ast.Name, ast.Attribute, ast.Subscript)):
            continue
        x = ctx.text(call.args[0])
        ed = ctx.editor()
        try:
            new = ed.replace(call.args[0], f"{x}.float()").apply()
        except ValueError:
            continue
        yield ctx.candidate("input-float", f"Pass {x}.float() (the layer's weights are float32)", new,
                            detail=ctx.crash.evalue[:120])
        return

"""Candidates that fix the cause where it began: in the cell that made the failing line's values, found by the
notebook's data flow (crane.analysis.provenance), not in the crashing cell. Generators (FixContext → Candidates,
no code run); each candidate edits that cell or reorders cells, and runs the edited cell and every executed
cell after it that feeds the target again before the target (`dependents`), so the sandbox checks the fix as
the user would run it.

- `rebuild`: the target's code already ran (the target itself, or a cell with the same code): its change
  (`drop(..., inplace=True)`, `lst.remove(x)`, `df = df.drop(...)`) is in the state, so running it again fails.
  Run again the cells that made the names it changes (from their fresh binding), then the target.
- `other-definition`: the crash is inside a function that two cells define (the one that ran last redefined
  it): run the other definition first.
- `array-source`: "'numpy.ndarray' object has no attribute 'join'" for a name a cell built from `X.values` /
  `X.to_numpy()` / `np.array(X)`: keep the DataFrame there.
- `literal-dtype`: a column compared with a literal of the other type (`df['month'] == '8'` on integers, an
  empty selection that fails later): the literal of the column's type, in the cell that built the selection.
- `grid-size`: "index 14 is out of bounds ... size 14" indexing a `plt.subplots` grid in a loop over the data:
  the grid sized from the loop's data.
- `label-count`: a literal list of tick labels of the wrong length: the keyword dropped, said in the title.
- `merge-suffix`: KeyError for a column a merge renamed to 'col_x' / 'col_y': the merge keeps the left names.
- `raw-cell`: NameError for a name only a raw (NBConvert) cell binds: that cell made a code cell, run first.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import msgspec

from crane.agent.guard import check_edit
from crane.analysis import provenance
from crane.analysis.cell import CellAnalysis, analyze_cell, is_predefined
from crane.fixes.context import RUN_CELL_COST, FixContext
from crane.fixes.edits import SourceEdit, change_size
from crane.fixes.model import Candidate

MAX_PER_GENERATOR = 4


def _cells_title(cells: list[int] | tuple[int, ...]) -> str:
    return f"cell {cells[0]}" if len(cells) == 1 else "cells " + ", ".join(map(str, cells))


def _target_reads(ctx: FixContext) -> set[str]:
    return {n for n in ctx.analysis.free_names if not is_predefined(n)}


def failing_names(ctx: FixContext) -> list[str]:
    """Names the failing statement loads (first load first)."""
    out: dict[str, None] = {}
    for n in ctx.crash_nodes(ast.Name):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.setdefault(n.id, None)
    return list(out)


def edit_cell(ctx: FixContext, kind: str, cell: int, new: str, what: str, detail: str) -> Candidate | None:
    """A candidate that changes cell `cell` to `new` (the target itself, or an earlier cell run again with the
    cells after it that feed the target), guarded like any edit."""
    if cell == ctx.target:
        return ctx.candidate(kind, what[0].upper() + what[1:], new, detail=detail)
    old = ctx.nb.cell(cell).source
    if new == old or check_edit(old, new) is not None:
        return None
    plan = provenance.dependents(ctx.scope, rebuilt_before(ctx, cell) + [cell], ctx.target, _target_reads(ctx))
    cost = change_size(old, new) + RUN_CELL_COST * len(plan)
    return Candidate(kind=kind, title=f"Cell {cell}: {what}; run {_cells_title(plan)} again",
                     source=ctx.source, run_first=tuple(plan), cell_edits=((cell, new),), cost=round(cost, 2),
                     detail=detail)


def rebuilt_before(ctx: FixContext, cell: int) -> list[int]:
    """The cells to run again before cell `cell` so that it finds what it changes as it found it when it ran: for
    each name it reads and changes (`df = pd.get_dummies(df)`, `df.drop(..., inplace=True)`), the cells that made
    that name up to it (from the fresh binding)."""
    d = ctx.scope.cell(cell)
    if d is None:
        return []
    out: set[int] = set()
    for name in provenance.reads_of(d):
        steps = provenance.trace(ctx.scope, name, ctx.target)
        mine = [i for i, t in enumerate(steps) if t.cell == cell and t.how in ("rebinds", "changes")]
        if mine:
            out |= {t.cell for t in steps[: mine[0]] if t.cell not in (cell, ctx.target)}
    return sorted(out)


def _analysis(ctx: FixContext, cell: int) -> CellAnalysis | None:
    if cell == ctx.target:
        return ctx.analysis
    d = ctx.scope.cell(cell)
    return d.analysis if d is not None and d.analysis.tree is not None else None


def _text(a: CellAnalysis, node: ast.AST) -> str:
    return ast.get_source_segment(a.python, node) or ast.unparse(node)


def _norm(a: CellAnalysis) -> str | None:
    return ast.dump(a.tree) if a.tree is not None and a.tree.body else None


# -- rebuild: the target's change already happened ----------------------------------------------------------
def rebuild(ctx: FixContext) -> Iterator[Candidate]:
    if ctx.depth > 1 or ctx.cell_edits:
        return
    mine = _norm(analyze_cell(ctx.original))
    if mine is None:
        return
    hist = provenance.history(ctx.scope, ctx.target)
    dups = {d.number for d in hist if _norm(d.analysis) == mine}
    if not dups:
        return
    changed: list[str] = []
    cells: set[int] = set()
    for name in sorted(_target_reads(ctx) | set(ctx.analysis.stored_names)):
        steps = provenance.trace(ctx.scope, name, ctx.target)
        if not any(t.cell in dups for t in steps):
            continue
        made = [t.cell for t in steps if t.cell not in dups]
        if made:
            changed.append(name)
            cells |= set(made)
    if not cells:
        return
    plan = provenance.dependents(ctx.scope, sorted(cells), ctx.target, _target_reads(ctx), exclude=dups)
    ran = ", ".join(f"cell {n}" for n in sorted(dups))
    names = ", ".join(f"`{n}`" for n in changed[:4])
    yield ctx.candidate("rebuild", f"Run {_cells_title(plan)} again first ({ran} already ran this code)",
                        run_first=tuple(plan),
                        detail=f"{ran} already ran this cell's code, which changed {names}: rebuilt from "
                               f"{_cells_title(plan)}")


# -- other-definition: a function redefined by the cell that ran last ---------------------------------------
def other_definition(ctx: FixContext) -> Iterator[Candidate]:
    if ctx.depth > 1:
        return
    tb = "\n".join(ctx.crash.traceback)
    hist = provenance.history(ctx.scope, ctx.target)
    n = 0
    for d in ctx.scope.cells:
        for name, fn in d.analysis.functions.items():
            if not isinstance(fn.node, (ast.FunctionDef, ast.AsyncFunctionDef)) or f"in {name}" not in tb:
                continue
            steps = provenance.trace(ctx.scope, name, ctx.target)
            last = steps[-1].cell if steps else None
            if last is None or last == d.number or d.number == ctx.target or d.number in ctx.run_first:
                continue
            if not any(h.number == last for h in hist):
                continue
            n += 1
            yield ctx.candidate("other-definition", f"Run cell {d.number} first (its `{name}`, which cell {last} "
                                f"redefined)", run_first=tuple(ctx.run_first) + (d.number,),
                                detail=f"the crash is inside `{name}` as cell {last} defines it; cell {d.number} "
                                       f"defines it too")
            if n >= MAX_PER_GENERATOR:
                return


# -- array-source: an ndarray where the code expects the DataFrame it came from -----------------------------
_NDARRAY_ATTR = re.compile(r"'numpy\.ndarray' object has no attribute '(\w+)'")
_TO_ARRAY = ("array", "asarray")


def _array_conversions(a: CellAnalysis, stmt: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(conversion node, the frame expression it converts) in a statement: `X.values`, `X.to_numpy()`,
    `np.array(X)`."""
    out: list[tuple[ast.AST, ast.AST]] = []
    for n in ast.walk(stmt):
        if isinstance(n, ast.Attribute) and n.attr == "values" and isinstance(n.ctx, ast.Load):
            out.append((n, n.value))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and not n.args and not n.keywords \
                and n.func.attr == "to_numpy":
            out.append((n, n.func.value))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _TO_ARRAY \
                and len(n.args) == 1 and not n.keywords and isinstance(n.args[0], (ast.Name, ast.Subscript)):
            out.append((n, n.args[0]))
    # a conversion inside another one: the outer one only
    return [(c, inner) for c, inner in out if not any(c is not o and any(c is x for x in ast.walk(o)) for o, _ in out)]


def array_source(ctx: FixContext) -> Iterator[Candidate]:
    m = _NDARRAY_ATTR.search(ctx.crash.evalue) if ctx.crash.ename == "AttributeError" else None
    if m is None or ctx.cell_edits:
        return
    attr = m.group(1)
    receivers = {n.value.id for n in ctx.crash_nodes(ast.Attribute)
                 if isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name)}
    for name in sorted(receivers):
        steps = [t for t in provenance.trace(ctx.scope, name, ctx.target) if t.how in ("binds", "rebinds")]
        if not steps:
            continue
        cell = steps[-1].cell
        a = _analysis(ctx, cell)
        if a is None or a.tree is None:
            continue
        stmt = next((s for s in ast.walk(a.tree) if isinstance(s, ast.Assign)
                     and name in {x.id for t in s.targets for x in ast.walk(t) if isinstance(x, ast.Name)}), None)
        if stmt is None:
            continue
        convs = _array_conversions(a, stmt.value)
        if not convs:
            continue
        ed = SourceEdit(a)
        try:
            for node, inner in convs:
                ed.replace(node, _text(a, inner))
            new = ed.apply()
        except ValueError:
            continue
        shown = ", ".join(f"`{_text(a, inner)}` for `{_text(a, node)}`" for node, inner in convs[:2])
        cand = edit_cell(ctx, "array-source", cell, new, f"keep the DataFrames ({shown})",
                         f"`{name}` is a NumPy array (it has no `{attr}`): cell {cell} built it from "
                         f"{', '.join(f'`{_text(a, n)}`' for n, _ in convs[:3])}")
        if cand is not None:
            yield cand


# -- literal-dtype: a comparison with a literal of the wrong type -------------------------------------------
def _number(text: str) -> str | None:
    t = text.strip()
    if re.fullmatch(r"[+-]?\d+", t):
        return str(int(t))
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?", t):
        return repr(float(t))
    return None


def literal_dtype(ctx: FixContext) -> Iterator[Candidate]:
    if ctx.depth > 1 or ctx.cell_edits or ctx.evaluator is None:
        return
    cells = [ctx.target] + provenance.origin_cells(ctx.scope, failing_names(ctx), ctx.target, depth=2)
    n = 0
    for cell in cells:
        a = _analysis(ctx, cell)
        if a is None or a.tree is None:
            continue
        for cmp in ast.walk(a.tree):
            if not isinstance(cmp, ast.Compare) or len(cmp.ops) != 1 or \
                    not isinstance(cmp.ops[0], (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
                continue
            left, right = cmp.left, cmp.comparators[0]
            if isinstance(left, ast.Constant):
                left, right = right, left
            if not isinstance(right, ast.Constant) or not isinstance(left, (ast.Subscript, ast.Attribute)):
                continue
            kind = ctx.evaluate(f"getattr(({_text(a, left)}), 'dtype').kind")
            value = right.value
            new_lit = None
            if isinstance(value, str) and kind in ("i", "u", "f"):
                new_lit = _number(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and kind == "O":
                if ctx.evaluate(f"bool((({_text(a, left)}).astype(str) == {str(value)!r}).any())") is True:
                    new_lit = repr(str(value))
            if new_lit is None:
                continue
            ed = SourceEdit(a)
            try:
                new = ed.replace(right, new_lit).apply()
            except ValueError:
                continue
            what = f"compare `{_text(a, left)}` with {new_lit}, not {_text(a, right)}"
            cand = edit_cell(ctx, "literal-dtype", cell, new, what,
                             f"`{_text(a, left)}` holds {'numbers' if kind in 'iuf' else 'text'}: "
                             f"`{_text(a, cmp)}` selects nothing")
            if cand is not None:
                n += 1
                yield cand
                if n >= MAX_PER_GENERATOR:
                    return


# -- grid-size: a subplot grid smaller than the data looped over --------------------------------------------
_OUT_OF_BOUNDS = re.compile(r"index (\d+) is out of bounds for axis \d+ with size (\d+)")


def _loop_count(ctx: FixContext, it: ast.AST) -> str | None:
    """An expression for how many items a for loop over `it` yields."""
    a = ctx.analysis
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("enumerate", "zip") and it.args:
        return _loop_count(ctx, it.args[0])
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
        return _text(a, it.args[0])
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and not it.args and \
            it.func.attr in ("items", "iteritems", "keys", "values"):
        return f"len({_text(a, it.func.value)})" if it.func.attr != "items" or \
            ctx.evaluate(f"hasattr({_text(a, it.func.value)}, 'columns')") is not True \
            else f"len({_text(a, it.func.value)}.columns)"
    if isinstance(it, (ast.Name, ast.Attribute, ast.Subscript, ast.List, ast.Tuple)):
        return f"len({_text(a, it)})"
    return None


def _int_arg(call: ast.Call, key: str, pos: int) -> ast.AST | None:
    kw = next((k.value for k in call.keywords if k.arg == key), None)
    if kw is None and len(call.args) > pos:
        kw = call.args[pos]
    return kw


def grid_size(ctx: FixContext) -> Iterator[Candidate]:
    if not (ctx.crash.ename == "IndexError" and _OUT_OF_BOUNDS.search(ctx.crash.evalue)) or ctx.analysis.tree is None:
        return
    tree = ctx.analysis.tree
    grids = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and c.func.attr == "subplots"]
    loops = [f for f in ast.walk(tree) if isinstance(f, ast.For)]
    failing = ctx.failing_statement()
    loop = next((f for f in loops if failing is not None and any(failing is s for s in ast.walk(f))), None)
    if not grids or loop is None:
        return
    count = _loop_count(ctx, loop.iter)
    if count is None:
        return
    call = grids[0]
    rows, cols = _int_arg(call, "nrows", 0), _int_arg(call, "ncols", 1)
    r = rows.value if isinstance(rows, ast.Constant) and isinstance(rows.value, int) else None
    c = cols.value if isinstance(cols, ast.Constant) and isinstance(cols.value, int) else None
    ed = ctx.editor()
    try:
        if r is not None and c is not None and r > 1 and c > 1:
            expr = f"({count} + {r - 1}) // {r}"
            ed.replace(cols, expr)  # type: ignore[arg-type]
            what = f"ncols={expr}"
        elif c is not None and (r is None or r == 1):
            expr = count
            ed.replace(cols, expr)  # type: ignore[arg-type]
            what = f"ncols={expr}"
        elif r is not None and (c is None or c == 1):
            expr = count
            ed.replace(rows, expr)  # type: ignore[arg-type]
            what = f"nrows={expr}"
        else:
            return
        new = ed.apply()
    except ValueError:
        return
    yield ctx.candidate("grid-size", f"Size the grid from the data ({what})", new,
                        detail=f"the loop over {count} items indexes a grid of {(r or 1) * (c or 1)} axes")



# -- label-count: a literal list of labels whose length does not match the data -----------------------------
_LABEL_COUNT = re.compile(r"number of \w+ locations \((\d+)\).*?number of labels \((\d+)\)", re.S)


def label_count(ctx: FixContext) -> Iterator[Candidate]:
    """"The number of FixedLocator locations (3) ... does not match the number of labels (2)": a keyword given a
    literal list of that many labels (`display_labels=[False, True]`) in the cell is dropped, and the title
    says so (the plot then labels the ticks itself)."""
    m = _LABEL_COUNT.search(ctx.crash.evalue) if ctx.crash.ename == "ValueError" else None
    if m is None or ctx.analysis.tree is None:
        return
    wrong = int(m.group(2))
    for call in ctx.all_nodes(ast.Call):
        assert isinstance(call, ast.Call)
        for kw in call.keywords:
            if kw.arg and isinstance(kw.value, (ast.List, ast.Tuple)) and len(kw.value.elts) == wrong and \
                    all(isinstance(e, ast.Constant) for e in kw.value.elts):
                try:
                    new = ctx.editor().remove_argument(call, kw).apply()
                except ValueError:
                    continue
                shown = ctx.text(kw)
                yield ctx.candidate("label-count", f"Drop `{shown}`: {wrong} labels for {m.group(1)} ticks (the plot "
                                    "labels its ticks itself)", new, penalty=5.0,
                                    detail=f"the data has {m.group(1)} classes, `{kw.arg}` lists {wrong}")


# -- merge-suffix: a column a merge renamed ('region' → 'region_x') ----------------------------------------
_KEY = re.compile(r"^KeyError: '([^']+)'$|^'([^']+)'$")


def merge_suffix(ctx: FixContext) -> Iterator[Candidate]:
    """KeyError for a column of a frame a cell built with a merge that renamed it ('region_x', 'region_y': both
    sides had it): that merge keeps the left column's name (`suffixes=('', '_right')`)."""
    m = _KEY.match(ctx.crash.evalue.strip()) if ctx.crash.ename == "KeyError" else None
    col = (m.group(1) or m.group(2)) if m else None
    if col is None or ctx.cell_edits or ctx.evaluator is None:
        return
    for name in failing_names(ctx):
        cols = ctx.evaluate(f"[c for c in getattr({name}, 'columns', []) if isinstance(c, str)]", [])
        if not isinstance(cols, list) or col in cols or not any(c.startswith(col + "_") for c in cols):
            continue
        steps = [t for t in provenance.trace(ctx.scope, name, ctx.target) if t.how in ("binds", "rebinds")]
        for step in reversed(steps):
            a = _analysis(ctx, step.cell)
            if a is None or a.tree is None:
                continue
            merges = [c for c in ast.walk(a.tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                      and c.func.attr == "merge" and not any(k.arg == "suffixes" for k in c.keywords)]
            for call in merges:
                try:
                    new = SourceEdit(a).add_keyword(call, "suffixes=('', '_right')").apply()
                except ValueError:
                    continue
                cand = edit_cell(ctx, "merge-suffix", step.cell, new, "keep the left column names in the merge "
                                 "(suffixes=('', '_right'))",
                                 f"`{name}` has no '{col}': the merge in cell {step.cell} renamed it "
                                 f"({', '.join(c for c in cols if c.startswith(col + '_'))})")
                if cand is not None:
                    yield cand
            if merges:
                return


# -- raw-cell: the binding cell is a raw cell -----------------------------------------------------------------
def raw_cell(ctx: FixContext) -> Iterator[Candidate]:
    """NameError for a name only a raw (NBConvert) cell binds, in Python: that cell made a code cell and run
    first (with the cells it needs)."""
    from crane.analysis.scope import cell_defs
    from crane.fixes.names import close_plan, missing_name

    name = missing_name(ctx.crash.evalue) if ctx.crash.ename == "NameError" else None
    if name is None:
        return
    for c in ctx.nb.cells:
        if c.cell_type != "raw" or not c.source.strip() or c.number in ctx.run_first:
            continue
        d = cell_defs(c.number, None, c.source)
        if d.analysis.tree is None or name not in d.binds:
            continue
        missing = [n for n in provenance.reads_of(d) if ctx.is_undefined(n)]
        plan = close_plan(ctx, list(ctx.run_first) + [ctx.scope.definers(n)[0].number for n in missing
                                                       if ctx.scope.definers(n)]) if missing else list(ctx.run_first)
        run = tuple(sorted(set(plan) | {c.number}, key=lambda k: (k == c.number, k)))
        cand = ctx.candidate("raw-cell", f"Make cell {c.number} a code cell (it is raw) and run it first",
                             run_first=run, detail=f"'{name}' is bound by cell {c.number}, a raw cell: it never runs")
        yield msgspec.structs.replace(cand, to_code=(c.number,))
        return


GENERATORS = (rebuild, other_definition, array_source, literal_dtype, grid_size, label_count, merge_suffix, raw_cell)

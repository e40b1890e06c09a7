"""More candidates where the crash began (see crane.fixes.cause for the shared machinery): values made in an
earlier cell that went stale or were built wrong. Generators only (no code run); each is verified by the search.

- `stale-input`: a name the failing line reads was made by cell L from a name that a later cell changed
  (`features = list(df.columns)` before `df = pd.get_dummies(df)`): run cell L again, after that change.
- `mask-frame`: a boolean mask built from another frame than the one it indexes (`train[test['Age'] > 30]`,
  "Unalignable boolean Series", "Item wrong length"): the mask built from the indexed frame, where it is built.
- `encode-missed`: "could not convert string to float" for data whose text columns an encoding step left out
  (`pd.get_dummies(df, columns=[...])`, a list of columns encoded in a loop): those columns added to that list.
- `column-dtype`: arithmetic or a numeric aggregate on a text column ("unsupported operand type(s) ... 'str'",
  "Could not convert ... to numeric", "could not convert string to float: '1,234'"): converted to numbers
  right after the statement that made the frame, in that cell (its formatting characters removed first).
- `rename-overwritten`: "'SVC' object has no attribute 'feature_importances_'" for a name a later statement of
  the same cell rebound (a loop over models, a second model): the earlier object gets its own name there and
  the failing line uses it.
- `index-length`: "Length of values (10) does not match length of index (12)" for `index=data.columns`: the
  labels of what the values describe (an estimator's `feature_names_in_`, a frame with that many columns).
- `shadowed-builtin`: "'int' object is not callable" calling `max(...)` after a cell bound `max`: that variable
  renamed where it is bound and read; verified in a fresh replay of the written notebook.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from crane.agent.guard import check_edit
from crane.analysis import provenance
from crane.analysis.cell import CellAnalysis
from crane.fixes.cause import (
    MAX_PER_GENERATOR,
    _analysis,
    _cells_title,
    _target_reads,
    _text,
    edit_cell,
    failing_names,
)
from crane.fixes.context import RUN_CELL_COST, FixContext
from crane.fixes.edits import SourceEdit, change_size
from crane.fixes.model import Candidate


# -- stale-input: made from a value that changed after --------------------------------------------------------
def stale_input(ctx: FixContext) -> Iterator[Candidate]:
    if ctx.depth > 1 or ctx.cell_edits:
        return
    hist = provenance.history(ctx.scope, ctx.target)
    order = {d.number: i for i, d in enumerate(hist)}
    n = 0
    seen: set[int] = set()
    for name in failing_names(ctx):
        steps = provenance.trace(ctx.scope, name, ctx.target)
        if not steps or steps[0].cell == ctx.target or steps[0].cell in seen:
            continue
        maker = steps[0].cell
        d = ctx.scope.cell(maker)
        if d is None or maker not in order:
            continue
        for read in sorted(provenance.reads_of(d)):
            later = [t for t in provenance.trace(ctx.scope, read, ctx.target)
                     if t.cell not in (maker, ctx.target) and order.get(t.cell, -1) > order[maker]]
            if not later:
                continue
            seen.add(maker)
            plan = provenance.dependents(ctx.scope, [maker], ctx.target, _target_reads(ctx))
            cells = ", ".join(map(str, plan))
            yield ctx.candidate("stale-input", f"Run cell{'s' if len(plan) > 1 else ''} {cells} again first (after "
                                f"cell {later[-1].cell} changed `{read}`)", run_first=tuple(ctx.run_first) + tuple(plan),
                                detail=f"`{name}` was made in cell {maker} from `{read}`, which cell {later[-1].cell} "
                                       f"changed after: {later[-1].text}")
            n += 1
            break
        if n >= MAX_PER_GENERATOR:
            return


# -- mask-frame: a mask built from another frame ---------------------------------------------------------------
_MASK = re.compile(r"Unalignable boolean Series|Item wrong length|Boolean index has wrong length|"
                   r"boolean index did not match|wrong length for the boolean|unalignable boolean", re.I)


def _roots(node: ast.AST) -> list[ast.Name]:
    """The names at the root of subscripts / attributes in an expression (`test` of `test['Age'] > 30`)."""
    out = []
    for n in ast.walk(node):
        if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.value, ast.Name):
            out.append(n.value)
    return out


def _remask(a: CellAnalysis, expr: ast.AST, frame: str) -> tuple[str, str] | None:
    other = [r for r in _roots(expr) if r.id != frame]
    if not other:
        return None
    ed = SourceEdit(a)
    try:
        for r in other:
            ed.replace(r, frame)
        return ed.apply(), other[0].id
    except ValueError:
        return None


def mask_frame(ctx: FixContext) -> Iterator[Candidate]:
    if not _MASK.search(ctx.crash.evalue) or ctx.cell_edits:
        return
    for sub in ctx.crash_nodes(ast.Subscript):
        assert isinstance(sub, ast.Subscript)
        base = sub.value.value if isinstance(sub.value, ast.Attribute) and sub.value.attr in ("loc", "iloc") \
            else sub.value
        if not isinstance(base, ast.Name):
            continue
        frame, mask = base.id, sub.slice
        if isinstance(mask, ast.Tuple) and mask.elts:
            mask = mask.elts[0]
        if isinstance(mask, ast.Name):  # built elsewhere: where the mask was made
            steps = [t for t in provenance.trace(ctx.scope, mask.id, ctx.target) if t.how == "binds"]
            if not steps:
                continue
            cell = steps[-1].cell
            a = _analysis(ctx, cell)
            stmt = next((s for s in ast.walk(a.tree) if isinstance(s, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == mask.id for t in s.targets)), None) if a and a.tree else None
            if a is None or stmt is None:
                continue
            seg = _remask(a, stmt.value, frame)
            if seg is None:
                continue
            cand = edit_cell(ctx, "mask-frame", cell, seg[0], f"build `{mask.id}` from `{frame}`, not `{seg[1]}`",
                             f"`{mask.id}` comes from `{seg[1]}` but indexes `{frame}`")
        else:
            seg = _remask(ctx.analysis, mask, frame)
            if seg is None:
                continue
            cand = ctx.candidate("mask-frame", f"Build the mask from `{frame}`, not `{seg[1]}`", seg[0],
                                 detail=f"the mask comes from `{seg[1]}` but indexes `{frame}`")
        if cand is not None:
            yield cand
            return


# -- encode-missed: an encoding step that left text columns out ----------------------------------------------
_TEXT_TO_FLOAT = re.compile(r"could not convert string to float|Cannot cast object dtype to float|"
                            r"argument must be a string or a( real)? number, not 'str'")


def _text_columns(ctx: FixContext) -> list[str]:
    for name in failing_names(ctx):
        cols = ctx.evaluate(f"[c for c in {name}.select_dtypes(include=['object', 'category', 'string']).columns "
                            f"if isinstance(c, str)] if hasattr({name}, 'select_dtypes') else None")
        if isinstance(cols, list) and cols:
            return [c for c in cols if isinstance(c, str)]
    return []


def _encoded_lists(a: CellAnalysis) -> list[ast.List]:
    """List literals of strings an encoding step uses as its columns: `get_dummies(..., columns=[...])`, and the
    list a `for col in [...]` loop encodes (its body calls fit_transform / map / astype / get_dummies)."""
    tree = a.tree
    if tree is None:
        return []
    named: dict[str, ast.List] = {}
    for s in ast.walk(tree):
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.List) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                           for e in s.value.elts):
            named[s.targets[0].id] = s.value
    out: list[ast.List] = []

    def resolve(node: ast.AST | None) -> ast.List | None:
        if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                              for e in node.elts):
            return node
        if isinstance(node, ast.Name):
            return named.get(node.id)
        return None

    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name)) and \
                (n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id) == "get_dummies":
            lst = resolve(next((k.value for k in n.keywords if k.arg == "columns"), None))
            if lst is not None:
                out.append(lst)
        elif isinstance(n, ast.For):
            encodes = any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in (
                "fit_transform", "map", "astype", "get_dummies", "factorize", "transform") for b in n.body
                for c in ast.walk(b))
            lst = resolve(n.iter)
            if encodes and lst is not None:
                out.append(lst)
    return out


def encode_missed(ctx: FixContext) -> Iterator[Candidate]:
    if not _TEXT_TO_FLOAT.search(ctx.crash.evalue) or ctx.cell_edits or ctx.depth > 1:
        return
    missing = _text_columns(ctx)
    if not missing:
        return
    n = 0
    for cell in provenance.origin_cells(ctx.scope, failing_names(ctx), ctx.target, depth=3):
        a = _analysis(ctx, cell)
        if a is None:
            continue
        for lst in _encoded_lists(a):
            have = [e.value for e in lst.elts if isinstance(e, ast.Constant)]
            add = [c for c in missing if c not in have]
            if not add:
                continue
            quote = "'" if not lst.elts or _text(a, lst.elts[0]).startswith("'") else '"'
            items = [_text(a, e) for e in lst.elts] + [f"{quote}{c}{quote}" for c in add]
            try:
                new = SourceEdit(a).replace(lst, "[" + ", ".join(items) + "]").apply()
            except ValueError:
                continue
            shown = ", ".join(repr(c) for c in add[:4])
            cand = edit_cell(ctx, "encode-missed", cell, new, f"encode {shown} too",
                             f"the encoding in cell {cell} left the text column{'s' if len(add) > 1 else ''} "
                             f"{shown} out")
            if cand is not None:
                n += 1
                yield cand
                if n >= MAX_PER_GENERATOR:
                    return


# -- column-dtype: a text column used as numbers ---------------------------------------------------------------
_TEXT_AS_NUMBER = re.compile(r"unsupported operand type\(s\) for .*'str'|can only concatenate str|"
                             r"Could not convert .* to numeric|could not convert string to float|"
                             r"agg function failed \[how->\w+,dtype->object\]|not supported between instances of "
                             r"'str' and '(int|float)'|not supported between instances of '(int|float)' and 'str'")


def column_dtype(ctx: FixContext) -> Iterator[Candidate]:
    from crane.fixes.pandas_fixes import _junk_chars, _lost, _pattern, _pd

    if not _TEXT_AS_NUMBER.search(ctx.crash.evalue) or ctx.cell_edits or ctx.depth > 1 or ctx.evaluator is None:
        return
    pd, _imports = _pd(ctx)
    done: set[tuple[str, str]] = set()
    for sub in ctx.crash_nodes(ast.Subscript):
        assert isinstance(sub, ast.Subscript)
        if not (isinstance(sub.value, ast.Name) and isinstance(sub.slice, ast.Constant)
                and isinstance(sub.slice.value, str)):
            continue
        frame, col = sub.value.id, sub.slice.value
        if (frame, col) in done or ctx.evaluate(f"{frame}[{col!r}].dtype.kind") != "O":
            continue
        done.add((frame, col))
        made = _made(ctx, frame, col)
        if made is None:
            continue
        cell, a, stmt, frame = made
        obj = f"{frame}[{col!r}]"
        junk = _junk_chars(ctx, obj)
        source = f"{obj}.astype(str).str.replace({_pattern(junk)}, '', regex=True)" if junk else obj
        conv = f"{pd}.to_numeric({source}, errors='coerce')"
        lost = _lost(ctx, conv, obj)
        if lost is None or lost > 0.5:
            continue
        try:
            new = SourceEdit(a).insert_after(stmt, [f"{obj} = {conv}"]).apply()
        except ValueError:
            continue
        what = f"convert {obj} to numbers where `{frame}` is made" + (f" (removing {junk!r})" if junk else "")
        cand = edit_cell(ctx, "column-dtype", cell, new, what,
                         f"`{obj}` holds text (dtype object) since cell {cell} made `{frame}`"
                         + (f"; {lost:.0%} of its values do not parse" if lost else ""))
        if cand is not None:
            yield cand


def _made(ctx: FixContext, frame: str, col: str) -> tuple[int, CellAnalysis, ast.Assign, str] | None:
    """(cell, its analysis, statement, frame) where the text column was made: the fresh binding of `frame`, or
    further back, of the frame it was selected from (`top = sales[...]`) while that one has the column as text."""
    found = None
    for _ in range(4):
        steps = [t for t in provenance.trace(ctx.scope, frame, ctx.target) if t.how in ("binds", "rebinds")]
        if not steps or steps[0].cell == ctx.target:
            return found
        cell = steps[0].cell
        a = _analysis(ctx, cell)
        stmt = next((s for s in (a.tree.body if a and a.tree else []) if isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == frame for t in s.targets)), None)
        if a is None or stmt is None:
            return found
        found = (cell, a, stmt, frame)
        roots = {r.id for r in _roots(stmt.value)} - {frame}
        source = next((r for r in sorted(roots) if ctx.evaluate(f"{r}[{col!r}].dtype.kind") == "O"), None)
        if source is None:
            return found
        frame = source
    return found


# -- rename-overwritten: a name a later statement rebound ------------------------------------------------------
_NO_ATTR = re.compile(r"^'(\w+)' object has no attribute '(\w+)'")


def _binders(tree: ast.Module, name: str) -> list[ast.stmt]:
    """Top-level statements of a cell binding `name` (assignments, for loops), in order."""
    out: list[ast.stmt] = []
    for s in tree.body:
        if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets):
            out.append(s)
        elif isinstance(s, ast.For) and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(s.target)):
            out.append(s)
    return out


def rename_overwritten(ctx: FixContext) -> Iterator[Candidate]:
    m = _NO_ATTR.match(ctx.crash.evalue) if ctx.crash.ename == "AttributeError" else None
    if m is None or ctx.cell_edits or ctx.depth > 1:
        return
    attr = m.group(2)
    for node in ctx.crash_nodes(ast.Attribute):
        if not (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)):
            continue
        name = node.value.id
        steps = [t for t in provenance.trace(ctx.scope, name, ctx.target) if t.how == "binds"]
        if not steps or steps[-1].cell == ctx.target:
            return
        cell = steps[-1].cell
        a = _analysis(ctx, cell)
        if a is None or a.tree is None:
            return
        binders = _binders(a.tree, name)
        if binders and isinstance(binders[-1], ast.For):  # a loop over models rebound it: rename its variable
            loop = _loop_rename(ctx, name, cell, a, binders[-1], binders[:-1], node, m.group(1))
            if loop is not None:
                yield loop
            return
        if len(binders) < 2:
            return
        n = 0
        for i, stmt in reversed(list(enumerate(binders[:-1]))):  # the latest one first: the nearest intent
            if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
                continue
            callee = stmt.value.func
            label = (callee.attr if isinstance(callee, ast.Attribute) else callee.id
                     if isinstance(callee, ast.Name) else "obj")
            fresh = ctx.fresh_name(f"{name}_{re.sub(r'[^0-9a-z]+', '_', label.lower()).strip('_') or 'obj'}")
            end = binders[i + 1].lineno
            ed = SourceEdit(a)
            try:
                for n_ in ast.walk(a.tree):
                    if isinstance(n_, ast.Name) and n_.id == name and stmt.lineno <= n_.lineno < end:
                        ed.replace(n_, fresh)
                new_cell = ed.apply()
                new_target = ctx.editor().replace(node.value, fresh).apply()
            except ValueError:
                continue
            cand = edit_cell(ctx, "rename-overwritten", cell, new_cell,
                             f"keep the {label} of line {a.original_line(stmt.lineno)} as `{fresh}`", "")
            if cand is None:
                continue
            yield Candidate(kind="rename-overwritten", title=f"{cand.title}; use `{fresh}` in cell {ctx.target}",
                            source=new_target, run_first=cand.run_first, cell_edits=cand.cell_edits,
                            cost=cand.cost + len(fresh) - len(name) + 50.0 * n,  # the nearest binding first
                            detail=f"`{name}` is a {m.group(1)} when the cell runs: cell {cell} rebound it after "
                                   f"line {stmt.lineno}")
            n += 1
            if n >= MAX_PER_GENERATOR:
                return
        return


def _loop_rename(ctx: FixContext, name: str, cell: int, a: CellAnalysis, loop: ast.For, before: list[ast.stmt],
                 node: ast.Attribute, cls: str) -> Candidate | None:
    """`for name, model in models.items(): ...` rebound `model`: the loop's variable renamed (in its target and
    body); the cells that made `model` before the loop (its binding, its fit) run again, then the edited cell."""
    if any(isinstance(b, ast.Assign) for b in before):
        return None  # bound earlier in the same cell: it runs again with the cell
    hist = provenance.history(ctx.scope, ctx.target)
    order = [d.number for d in hist]
    if cell not in order:
        return None
    made: list[int] = []
    for d in hist[: order.index(cell)]:
        for t in provenance.touches(d, name):
            if t.how in ("binds", "deletes"):
                made = [] if t.how == "deletes" else [t.cell]
            elif made and t.cell not in made:
                made.append(t.cell)
    if not made:
        return None
    fresh = ctx.fresh_name(f"each_{name}")
    ed = SourceEdit(a)
    try:
        for n in ast.walk(loop):
            if isinstance(n, ast.Name) and n.id == name:
                ed.replace(n, fresh)
        new = ed.apply()
    except ValueError:
        return None
    old = ctx.nb.cell(cell).source
    if check_edit(old, new) is not None:
        return None
    plan = provenance.dependents(ctx.scope, made + [cell], ctx.target, _target_reads(ctx))
    cost = change_size(old, new) + RUN_CELL_COST * len(plan)
    return Candidate(kind="rename-overwritten", title=f"Cell {cell}: name the loop's variable `{fresh}`, not "
                     f"`{name}`; run {_cells_title(plan)} again", source=ctx.source, run_first=tuple(plan),
                     cell_edits=((cell, new),), cost=round(cost, 2),
                     detail=f"`{name}` is a {cls} when the cell runs: the loop in cell {cell} rebound the one made in "
                            f"cell {made[0]}")


# -- index-length: labels taken from another frame than the values' ------------------------------------------
_LENGTHS = re.compile(r"Length of values \((\d+)\) does not match length of index \((\d+)\)")


def index_length(ctx: FixContext) -> Iterator[Candidate]:
    """`Series(model.feature_importances_, index=data.columns)` with 10 values and 12 labels: the labels of what
    the values describe — an estimator's `feature_names_in_` of that length, or the columns of a frame of the
    state with that many columns (one a fit call of the notebook used first)."""
    m = _LENGTHS.search(ctx.crash.evalue) if ctx.crash.ename == "ValueError" else None
    if m is None or ctx.evaluator is None:
        return
    n = int(m.group(1))
    kw = next((k for c in ctx.crash_nodes(ast.Call) if isinstance(c, ast.Call) for k in c.keywords
               if k.arg == "index"), None)
    if kw is None:
        return
    options: list[str] = []
    for name in sorted({x.id for x in ctx.all_nodes(ast.Name) if isinstance(x, ast.Name)}):
        if ctx.evaluate(f"len(getattr({name}, 'feature_names_in_', ())) == {n}") is True:
            options.append(f"{name}.feature_names_in_")
    frames = ctx.evaluate(f"sorted(k for k, v in list(globals().items()) if not k.startswith('_') and "
                          f"hasattr(v, 'columns') and getattr(v, 'ndim', 0) == 2 and len(v.columns) == {n})", [])
    fitted = [a for d in ctx.scope.cells for a in d.analysis.free_names]
    if isinstance(frames, list):
        ranked = sorted((f for f in frames if isinstance(f, str)), key=lambda f: (f not in fitted, f))
        options += [f"{f}.columns" for f in ranked[:3]]
    old = ctx.text(kw.value)
    for text in options[:MAX_PER_GENERATOR]:
        if text == old:
            continue
        try:
            new = ctx.editor().replace(kw.value, text).apply()
        except ValueError:
            continue
        yield ctx.candidate("index-length", f"Label with {text} ({n} labels for {n} values)", new,
                            detail=f"{n} values, but `{old}` has {m.group(2)} labels")


# -- shadowed-builtin: a cell bound a builtin's name ----------------------------------------------------------
_NOT_CALLABLE = re.compile(r"^'([\w.]+)' object is not callable")


def shadowed_builtin(ctx: FixContext) -> Iterator[Candidate]:
    """"'int' object is not callable" calling `max(...)`, `list(...)`: an executed cell bound the builtin's name
    (`max = df.Age.max()`, `for list in ...`). That variable gets its own name in the cells that bind or read it
    (calls of the builtin left alone); verified in a fresh replay of the written notebook (`fresh`): the live
    state keeps the overwritten name whatever runs."""
    from crane.analysis.cell import BUILTIN_NAMES

    m = _NOT_CALLABLE.match(ctx.crash.evalue) if ctx.crash.ename == "TypeError" else None
    if m is None or ctx.cell_edits or ctx.depth > 1:
        return
    called = {c.func.id for c in ctx.crash_nodes(ast.Call) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
              and c.func.id in BUILTIN_NAMES}
    hist = [d for d in provenance.history(ctx.scope, ctx.target) if d.number != ctx.target]
    for name in sorted(called):
        binders = [d.number for d in hist if any(t.how in ("binds", "rebinds") for t in provenance.touches(d, name))]
        if not binders:
            continue
        fresh = ctx.fresh_name(f"{name}_value")
        edits: list[tuple[int, str]] = []
        first = next(i for i, d in enumerate(hist) if d.number in binders)
        for d in hist[first:]:  # before the first binding, a load of the name is the builtin's
            if d.analysis.tree is None:
                continue
            calls = {id(c.func) for c in ast.walk(d.analysis.tree) if isinstance(c, ast.Call)}
            nodes = [n for n in ast.walk(d.analysis.tree) if isinstance(n, ast.Name) and n.id == name
                     and id(n) not in calls]
            if not nodes:
                continue
            ed = SourceEdit(d.analysis)
            try:
                for n in nodes:
                    ed.replace(n, fresh)
                new = ed.apply()
            except ValueError:
                edits = []
                break
            if check_edit(ctx.nb.cell(d.number).source, new) is not None:
                edits = []
                break
            edits.append((d.number, new))
        if not edits:
            continue
        cells = sorted({k for k, _ in edits})
        plan = provenance.dependents(ctx.scope, cells, ctx.target, _target_reads(ctx))
        cost = sum(change_size(ctx.nb.cell(k).source, v) for k, v in edits) + RUN_CELL_COST * len(plan)
        yield Candidate(kind="shadowed-builtin", title=f"{_cells_title(cells).capitalize()}: name the variable "
                        f"`{fresh}`, not `{name}` (it hid the builtin); run {_cells_title(plan)} again",
                        source=ctx.source, run_first=tuple(plan), cell_edits=tuple(edits), cost=round(cost, 2),
                        fresh=True, detail=f"cell {binders[-1]} bound `{name}` to a {m.group(1)}, hiding the builtin "
                                           f"`{name}()` the failing line calls")


GENERATORS = (stale_input, mask_frame, encode_missed, column_dtype, rename_overwritten, index_length,
              shadowed_builtin)

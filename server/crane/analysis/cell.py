"""Static analysis of one notebook cell: `analyze_cell(source)` and `plan_probe(analysis)`.

`analyze_cell` never raises. It turns IPython syntax into Python (crane.analysis.transform), parses it, and
collects: names loaded before any binding (`free_names` / `free_loads`, crane.analysis.bindings), names bound
and deleted, imports, attribute chains, literal keys and labels, literal file paths. A cell that does not
compile gets `syntax_error` (on its ORIGINAL line) and `tree=None`. Positions of AST nodes are in `python`;
`original_span(node)` maps them back to the cell's own lines and columns.

`plan_probe` turns an analysis into the ProbeRequest the kernel-side probe answers (crane.probe.facts).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from crane import pyast
from crane.analysis import bindings as _bindings
from crane.analysis import extract
from crane.analysis.extract import AttrChain, ImportFact, LiteralKey, PathUse
from crane.analysis.transform import transform
from crane.probe.facts import ProbeRequest

BUILTIN_NAMES = frozenset(dir(builtins))
# Names IPython puts in every user namespace (or its builtins).
IPYTHON_NAMES = frozenset({
    "get_ipython", "In", "Out", "exit", "quit", "display", "_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh",
    "_dh", "__builtin__", "__builtins__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
    "_exit_code",
})

# Probe budget: never ask for more than this many of each.
MAX_ATTRS = 64
MAX_KEYS = 64
MAX_PATHS = 32
MAX_CONSTRUCTIONS = 8
MAX_LABELS = 200
MAX_LABEL_CHARS = 200


def is_predefined(name: str) -> bool:
    """A builtin or a name IPython defines in every kernel (including `_1`, `_i3`, ...)."""
    if name in BUILTIN_NAMES or name in IPYTHON_NAMES:
        return True
    return name.startswith("_") and (name[1:].isdigit() or (name[:2] in ("_i", "_o") and name[2:].isdigit()))


@dataclass
class SyntaxProblem:
    ename: str  # "SyntaxError" | "IndentationError" | "TabError"
    message: str
    line: int  # original 1-based line
    col: int = 0
    end_col: int | None = None


@dataclass
class CellAnalysis:
    source: str
    python: str
    tree: ast.Module | None
    line_map: list[int]
    cell_magic: str | None = None
    syntax_error: SyntaxProblem | None = None
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    free_loads: list[_bindings.NameLoad] = field(default_factory=list)
    stored_names: set[str] = field(default_factory=set)
    deleted_names: set[str] = field(default_factory=set)
    functions: dict[str, _bindings.FunctionInfo] = field(default_factory=dict)
    dynamic: list[ast.AST] = field(default_factory=list)  # star imports, exec, %run...: names after are unknown
    imports: list[ImportFact] = field(default_factory=list)
    attr_chains: list[AttrChain] = field(default_factory=list)
    literal_keys: list[LiteralKey] = field(default_factory=list)
    paths: list[PathUse] = field(default_factory=list)

    @property
    def free_names(self) -> list[str]:
        """Names loaded before any binding, in order of first load (builtins included)."""
        seen: dict[str, None] = {}
        for ld in self.free_loads:
            seen.setdefault(ld.name, None)
        return list(seen)

    # -- positions ----------------------------------------------------------------------------------
    def original_line(self, py_line: int) -> int:
        if not self.line_map:
            return max(1, py_line)
        i = min(max(py_line, 1), len(self.line_map)) - 1
        return self.line_map[i]

    def _line_text(self, text: str, line: int) -> str:
        lines = text.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def original_span(self, node: ast.AST, end_node: ast.AST | None = None) -> tuple[int, int, int, int]:
        """(line, col, end_line, end_col) of a node of `tree`, in the original cell source."""
        end = end_node or node
        py_line = getattr(node, "lineno", 1)
        py_end = getattr(end, "end_lineno", None) or py_line
        line, end_line = self.original_line(py_line), self.original_line(py_end)
        # ast columns are UTF-8 byte offsets; Findings carry character offsets (what editors and SARIF count)
        col = _char_col(self._line_text(self.python, py_line), getattr(node, "col_offset", 0) or 0)
        end_col = getattr(end, "end_col_offset", None)
        if end_col is not None:
            end_col = _char_col(self._line_text(self.python, py_end), end_col)
        orig = self._line_text(self.source, line)
        if self._line_text(self.python, py_line) != orig:
            col = len(orig) - len(orig.lstrip())
        orig_end = self._line_text(self.source, end_line)
        if end_col is None or self._line_text(self.python, py_end) != orig_end:
            end_col = len(orig_end.rstrip())
        if end_line < line or (end_line == line and end_col < col):
            end_line, end_col = line, max(col, len(orig.rstrip()))
        return line, col, end_line, end_col


def _char_col(line: str, byte_col: int) -> int:
    """A UTF-8 byte offset into `line` (as Python's ast reports columns) as a character offset."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _syntax_problem(exc: SyntaxError, analysis: CellAnalysis) -> SyntaxProblem:
    py_line = exc.lineno or 1
    line = analysis.original_line(py_line)
    col = max((exc.offset or 1) - 1, 0)
    end_col = (exc.end_offset - 1) if exc.end_offset and exc.end_lineno == exc.lineno else None
    if analysis._line_text(analysis.python, py_line) != analysis._line_text(analysis.source, line):
        col, end_col = 0, None
    msg = exc.msg or "invalid syntax"
    return SyntaxProblem(type(exc).__name__, msg, line, col, end_col if end_col and end_col > col else None)


def analyze_cell(source: str) -> CellAnalysis:
    """Analyse one cell's source (IPython syntax allowed). Never raises."""
    source = source if isinstance(source, str) else str(source)
    try:
        python, line_map, magic = transform(source)
    except Exception:
        python, line_map, magic = source, list(range(1, source.count("\n") + 2)), None
    analysis = CellAnalysis(source=source, python=python, tree=None, line_map=line_map, cell_magic=magic)
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = pyast.parse(python, "<cell>", flags)
        # The compiler's later passes find more errors (`return` outside a function, ...): compile, not run.
        pyast.compile_tree(tree, "<cell>", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        analysis.syntax_error = _syntax_problem(exc, analysis)
        return analysis
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:  # null bytes, too deep, ...
        analysis.syntax_error = SyntaxProblem("SyntaxError", str(exc) or type(exc).__name__, 1)
        return analysis
    analysis.tree = tree
    try:
        analysis.parents = _parents(tree)
        b = _bindings.bindings(tree)
        analysis.free_loads = b.loads
        analysis.stored_names = b.stored
        analysis.deleted_names = b.deleted
        analysis.functions = b.functions
        analysis.dynamic = b.dynamic
        analysis.imports = extract.imports(tree)
        analysis.attr_chains = extract.attr_chains(tree, analysis.parents)
        analysis.literal_keys = extract.literal_keys(tree, analysis.parents)
        analysis.paths = extract.paths(tree)
    except RecursionError:
        pass
    return analysis


def plan_probe(analysis: CellAnalysis) -> ProbeRequest:
    """What the probe must answer for this cell: free names, and the attribute chains / literal keys whose
    base is a free name, modules imported, literal paths read."""
    names = [n for n in analysis.free_names if not is_predefined(n)]
    free = set(names)
    attrs: list[str] = []
    for chain in analysis.attr_chains:
        if chain.base in free and chain.text not in attrs and chain.text.count(".") <= 3:
            attrs.append(chain.text)
    keys: list[list] = []
    seen_keys = set()
    for lk in analysis.literal_keys:
        if lk.expr.split(".", 1)[0] not in free:
            continue
        for k in lk.keys:
            marker = (lk.expr, repr(k), lk.axis)
            if marker not in seen_keys:
                seen_keys.add(marker)
                keys.append([lk.expr, k, lk.axis])
    modules: list[str] = []
    for imp in analysis.imports:
        if imp.level == 0 and imp.top and imp.top not in modules:
            modules.append(imp.top)
    paths: list[str] = []
    for p in analysis.paths:
        if p.mode == "read" and p.path not in paths:
            paths.append(p.path)
    return ProbeRequest(
        names=names, attrs=attrs[:MAX_ATTRS], keys=keys[:MAX_KEYS], modules=modules, paths=paths[:MAX_PATHS],
        columns=mentioned_labels(analysis), constructions=literal_constructions(analysis),
    )


def literal_constructions(analysis: CellAnalysis) -> list[list]:
    """Class-like calls with keyword arguments only, all literals (`RandomForestClassifier(max_features='auto')`),
    for the kernel's own parameter validation: [call text, callee (the cell's imports resolved), {kw: source}]."""
    if analysis.tree is None:
        return []
    aliases = {imp.bound: imp.target for imp in analysis.imports if imp.bound != "*" and imp.level == 0}
    out: list[list] = []
    seen: set[str] = set()
    for node in ast.walk(analysis.tree):
        if not isinstance(node, ast.Call) or node.args or not node.keywords:
            continue
        parts: list[str] = []
        f: ast.expr = node.func
        while isinstance(f, ast.Attribute):
            parts.insert(0, f.attr)
            f = f.value
        if not isinstance(f, ast.Name) or not (parts[-1] if parts else f.id)[:1].isupper():
            continue
        kwargs = {}
        for k in node.keywords:
            try:
                ast.literal_eval(k.value)
            except Exception:
                break
            if k.arg is None:
                break
            kwargs[k.arg] = ast.unparse(k.value)
        else:
            callee = ".".join([aliases.get(f.id, f.id), *parts])
            key = ast.unparse(node)
            if key not in seen and len(key) <= 500:
                seen.add(key)
                out.append([key, callee, kwargs])
        if len(out) >= MAX_CONSTRUCTIONS:
            break
    return out


def mentioned_labels(analysis: CellAnalysis) -> list[str | int]:
    """Every label the cell could name a DataFrame column by: string constants (subscripts, `columns=[...]`,
    seaborn's `x="col"`, `groupby("col")`, ...), attribute names (`df.price`) and integer subscripts (`df[0]`).
    The probe gives value facts for these columns only (a superset of what the rules look up by label)."""
    if analysis.tree is None:
        return []
    seen: dict[str | int, None] = {}
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if 0 < len(node.value) <= MAX_LABEL_CHARS:
                seen.setdefault(node.value, None)
        elif isinstance(node, ast.Attribute):
            seen.setdefault(node.attr, None)
        elif isinstance(node, ast.Subscript):
            sl = node.slice
            for k in sl.elts if isinstance(sl, ast.Tuple) else [sl]:
                if isinstance(k, ast.Constant) and type(k.value) is int:
                    seen.setdefault(k.value, None)
        if len(seen) >= MAX_LABELS:
            break
    return list(seen)

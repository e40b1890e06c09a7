"""Rule `missing-file`: a literal path read by open() (read modes only) or a reader (pd.read_csv & co,
np.load/loadtxt/genfromtxt, joblib.load, plt.imread, ...) that the probe says does not exist relative to the
kernel's working directory -> FileNotFoundError. Not judged when the cell writes that path earlier, changes
directory (os.chdir, %cd) before, or when `open` was rebound."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from crane.finding import Finding
from crane.rulekit.context import RuleContext
from crane.rulekit.registry import rule


def _chdir_before(ctx, node: ast.expr) -> bool:
    for call in ctx.calls():
        if (call.lineno, call.col_offset) >= (node.lineno, node.col_offset):
            break
        text = ctx.text(call.func)
        if text.endswith("chdir") or (text.endswith("run_line_magic") and call.args
                                       and ctx.literal(call.args[0]) in ("cd", "pushd")):
            return True
    return False


@rule("missing-file", needs_probe=True, environment=True)
def missing_file(ctx: RuleContext) -> Iterator[Finding]:
    uses = ctx.analysis.paths
    reported: set[str] = set()
    for i, use in enumerate(uses):
        if use.mode != "read" or use.path in reported or ctx.probed.paths.get(use.path) is not False:
            continue
        if any(u.path == use.path and u.mode != "read" for u in uses[:i]):
            continue
        if use.func == "open" and ("open" in ctx.probed.facts or "open" in ctx.analysis.stored_names):
            continue
        if not ctx.is_certain(use.node) or _chdir_before(ctx, use.node):
            continue
        reported.add(use.path)
        where = f" (kernel working directory: {ctx.probed.cwd})" if ctx.probed.cwd else ""
        local = ctx.probe is None  # no kernel: relative to the notebook's folder, a weaker sign
        source = "relative to the notebook's folder; no kernel attached" if local else "probe"
        yield ctx.finding(
            use.arg, rule="missing-file", ename="FileNotFoundError",
            message=f"No such file or directory: {use.path!r}{where}", root_cause="NB specific",
            confidence=0.8 if local else 0.93,
            evidence=[f"{use.func}() reads {use.path!r}, which does not exist ({source})"],
        )

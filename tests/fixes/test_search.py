"""The search's guarantees: the anti-hack guard drops candidates that hide the crash, follow-ups fix a second
crash, a broken generator does not stop the others, and the user's kernel is unchanged by a whole search
(namespace, execution count, history; nothing on iopub)."""

from __future__ import annotations

from crane.analysis.scope import NotebookScope
from crane.fixes import generate as generate_mod
from crane.fixes.context import FixContext
from crane.fixes.model import Crash
from crane.fixes.sandbox import ForkFixSandbox
from crane.fixes.search import search_fixes

from ..sacred import IopubWatcher, kernel_state
from .conftest import fix_search, notebook

TARGET = "x = 1\nvalue = data['b'] / x\nprint(value)\n"
HACKS = {
    "try/except": "x = 1\ntry:\n    value = data['b'] / x\nexcept KeyError:\n    value = None\nprint(value)\n",
    "suppress": "import contextlib\nx = 1\nwith contextlib.suppress(KeyError):\n    value = data['b'] / x\n",
    "commented out": "x = 1\n# value = data['b'] / x\nvalue = 0\nprint(value)\n",
    "deleted": "x = 1\nprint(1)\n",
    "if False": "x = 1\nif False:\n    value = data['b'] / x\nprint(1)\n",
    "emptied": "pass\n",
}
HONEST = "x = 1\nvalue = data['a'] / x\nprint(value)\n"


def test_the_guard_drops_candidates_that_hide_the_crash(monkeypatch):
    nb = notebook([("data = {'a': 1}\n", True), (TARGET, False)])
    ctx = FixContext(nb=nb, target=2, original=TARGET, source=TARGET, crash=Crash("KeyError", "'b'", 2),
                     scope=NotebookScope.from_notebook(nb))

    def hacks(c):
        for name, src in HACKS.items():
            yield c.candidate("hack", name, src)
        yield c.candidate("nearest-key", "Use key 'a'", HONEST)

    def broken(c):
        raise RuntimeError("a broken generator")

    monkeypatch.setattr(generate_mod, "GENERATORS", (broken, hacks))
    refused: list[str] = []
    out = generate_mod.generate(ctx, refused)
    assert [c.source for c in out] == [HONEST]
    assert len(refused) == len(HACKS) and all(r.startswith("hack: refused:") for r in refused)


def test_a_follow_up_fixes_the_second_crash(kernel):
    cells = [("import pandas as pd\ndf = pd.DataFrame({'Price': ['$1,200', '$950']})\n", True),
             ("df['price'] = df['price'].astype(float)\nprint(df['price'].sum())\n", False)]
    r = fix_search(kernel, cells, 2)
    fix = r.fixes[0]
    assert "df['Price']" in fix.new and ".str.replace(" in fix.new and fix.stdout.strip() == "2150.0"
    assert ";" in fix.title  # two changes: the column, then the conversion


def test_the_users_kernel_is_unchanged(kernel):
    conn = kernel.connection
    conn.run_cell("%reset -f", timeout=60)
    setup = "import pandas as pd\nsales = pd.DataFrame({'Total_Gross': [1.0, 2.0]})\nmore = 3\n"
    assert conn.run_cell(setup, timeout=60).status == "ok"
    nb = notebook([(setup, True), ("extra = more * 2\n", False), ("print(sales['total gross'].sum() + extra)\n", False)])
    before = kernel_state(conn)
    watcher = IopubWatcher(kernel.manager.connection_file)
    try:
        sandbox = ForkFixSandbox(conn, budget_s=30.0)
        try:
            report = search_fixes(nb, 3, sandbox)
        finally:
            sandbox.close()
        assert report.fixes and report.fixes[0].run_first == (2,) and "Total_Gross" in report.fixes[0].new
        assert kernel_state(conn) == before
        assert watcher.outputs() == []
    finally:
        watcher.close()
    assert conn.evaluate("'extra' in globals()") is False


def test_the_replay_sandbox_verifies_where_forking_is_impossible(tmp_path):
    """The fallback (remote kernels, no fork): candidates run in a kernel CRANE owns replaying the history."""
    from crane.fixes.sandbox import ReplayFixSandbox

    setup = "import pandas as pd\nsales = pd.DataFrame({'Total_Gross': [1.0, 2.0]})\n"
    nb = notebook([(setup, True), ("print(sales['total gross'].sum())\n", False)], path=str(tmp_path / "nb.ipynb"))
    sandbox = ReplayFixSandbox(nb, budget_s=60.0)
    try:
        report = search_fixes(nb, 2, sandbox)
    finally:
        sandbox.close()
    assert report.sandbox == "replay" and report.fixes[0].sandbox == "replay"
    assert report.fixes[0].new == "print(sales['Total_Gross'].sum())\n" and report.fixes[0].stdout.strip() == "3.0"

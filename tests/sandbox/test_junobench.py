"""Over every junobench-lite variant: the sandbox's verdict matches the label and the user's kernel is
unchanged (namespace keys and ids, execution count, In/Out, no iopub output seen by a second client).
Slow (one kernel and a history replay per variant, about 2-3 minutes): `-m slow`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.notebook.history import history_before
from crane.notebook.model import load_notebook
from crane.sandbox import speculate

from ..sacred import IopubWatcher, kernel_state

ROOT = Path(__file__).resolve().parents[3] / "shared" / "bench" / "junobench-lite"
VARIANTS = [(p.parent, name) for p in sorted(ROOT.glob("*/case.json"))
            for name in json.loads(p.read_text())["variants"]]


@pytest.mark.slow
@pytest.mark.parametrize("case_dir,variant", VARIANTS, ids=[f"{d.name}/{v}" for d, v in VARIANTS])
def test_variant(case_dir: Path, variant: str):
    var = json.loads((case_dir / "case.json").read_text())["variants"][variant]
    nb = load_notebook(case_dir / var["notebook"])
    kernel = start_kernel(case_dir)
    try:
        conn = kernel.connection
        for cell in history_before(nb, var["target_cell"]):
            conn.run_cell(cell.source, timeout=300)
        watcher = IopubWatcher(kernel.manager.get_connection_info())
        try:
            time.sleep(0.2)
            before = kernel_state(conn)
            v = speculate(conn, nb.cell(var["target_cell"]).source, 30.0)
            time.sleep(0.2)
            assert kernel_state(conn) == before
            assert watcher.outputs() == []
        finally:
            watcher.close()
    finally:
        kernel.shutdown()
    expect = var["expect"]
    if expect["crash"]:
        assert v.verdict == "crash" and v.ename == expect["ename"], v
    else:
        assert v.verdict == "no-crash", v

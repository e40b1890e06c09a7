"""heavy-lite (../shared/bench/heavy-lite: cells that write files, start worker processes, run for about a
minute, or crash in the first iteration of a long loop): the sandbox decides them as `crane check --mode auto`
does (full size, then a miniature when the full run times out), never raises a false alarm, and the user's
kernel is unchanged (namespace keys and ids, execution count, In/Out, no iopub output seen by a second
client). Two variants run here (workers, a long cell: under a minute); `CRANE_HEAVY_ALL=1` runs all 24, and
`benchmarks/sandbox_bench.py --set ../shared/bench/heavy-lite` scores them (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.notebook.history import history_before
from crane.notebook.model import load_notebook
from crane.sandbox.scale import speculate_scaled

from ..library_versions import skip_without_torch_in
from ..sacred import IopubWatcher, kernel_state

ROOT = Path(__file__).resolve().parents[3] / "shared" / "bench" / "heavy-lite"
ALL = [(p.parent, name) for p in sorted(ROOT.glob("*/case.json")) for name in json.loads(p.read_text())["variants"]]
# starts DataLoader worker processes; long, then crashes (a miniature run)
SUBSET = {("heavy_insurance_dataloader_workers", "fixed"), ("heavy_taxi_gbm_dropped_feature", "buggy")}
VARIANTS = ALL if os.environ.get("CRANE_HEAVY_ALL") else [(d, v) for d, v in ALL if (d.name, v) in SUBSET]
BUDGET_S = 8.0

pytestmark = pytest.mark.skipif(not ROOT.is_dir(), reason="the heavy-lite benchmark set is not there")


@pytest.mark.slow
@pytest.mark.parametrize("case_dir,variant", VARIANTS, ids=[f"{d.name}/{v}" for d, v in VARIANTS])
def test_variant(case_dir: Path, variant: str):
    var = json.loads((case_dir / "case.json").read_text())["variants"][variant]
    nb = load_notebook(case_dir / var["notebook"])
    kernel = start_kernel(case_dir)
    try:
        conn = kernel.connection
        if any("torch" in cell.source for cell in nb.cells):
            skip_without_torch_in(conn)  # the bench extra has no torch from Python 3.12
        for cell in history_before(nb, var["target_cell"]):
            conn.run_cell(cell.source, timeout=600)
        before_files = sorted(p.relative_to(case_dir).as_posix() for p in case_dir.rglob("*"))
        watcher = IopubWatcher(kernel.manager.get_connection_info())
        try:
            time.sleep(0.2)
            before = kernel_state(conn)
            v = speculate_scaled(conn, nb.cell(var["target_cell"]).source, BUDGET_S, places=[str(case_dir)])
            time.sleep(0.2)
            assert kernel_state(conn) == before
            assert watcher.outputs() == []
        finally:
            watcher.close()
    finally:
        kernel.shutdown()
    assert sorted(p.relative_to(case_dir).as_posix() for p in case_dir.rglob("*")) == before_files  # no file written
    expect = var["expect"]
    assert v.mode == "layered", v
    if expect["crash"]:
        assert v.verdict != "no-crash", v
        if v.verdict == "crash":
            assert v.ename == expect["ename"], v
    else:
        assert v.verdict != "crash", v  # never a false alarm

"""Long cells in the daemon (auto mode, a real kernel): a cell whose last run (measured by the kernel watcher)
outlasts the budget is judged by a miniature run (the diagnostic says so: scale "miniature", how much was
kept); it then gets a background full-size run at idle priority, shown as work-done progress, whose crash
replaces the miniature verdict; a background run stops at once, with its whole process tree, when the cell
is edited or any cell runs; the hover says how the verdict was reached."""

from __future__ import annotations

import os
import uuid

import pytest
import pytest_asyncio
from lsprotocol import types

from crane.lsp.messages import DiagnosticData, decode_params
from crane.sandbox.verdict import SandboxVerdict

from .conftest import Notebook, crane_diags, start_client, stop_client, wait_for

BIG = 40000
SETUP = f"import time, numpy as np, pandas as pd\ndf = pd.DataFrame({{'a': np.arange({BIG}), 'k': np.arange({BIG}) % 7}})\n"
# about 3 s on the full frame (a slow row loop), then a KeyError
LONG = "total = 0\nfor _, row in df.iterrows():\n    total += row['a']\n    time.sleep(0.00005)\ndf['missing_col']\n"


@pytest.fixture(scope="module")
def bg_kernel(kernel):
    kernel.run(SETUP)
    return kernel


@pytest_asyncio.fixture
async def client(bg_kernel, tmp_path):
    # normal CPU priority: on a test machine other jobs could starve an idle-priority run
    c = await start_client(env={"JUPYTER_RUNTIME_DIR": str(tmp_path), "CRANE_LSP_BACKGROUND_IDLE": "0"}, mode=None,
                           init_options={"crane": {"speculative": {"budgetSeconds": 1.0, "backgroundSeconds": 600}}})
    yield c
    await stop_client(c)


async def attach(client, nb, kernel):
    res = await client.protocol.send_request_async(
        "crane/attachKernel", {"notebookUri": nb.uri, "connectionFile": kernel.connection_file}
    )
    assert res.attached, res.message


def sandbox_data(client, uri) -> SandboxVerdict | None:
    """The cell's first diagnostic's `data.sandbox`, decoded: the sandbox's record of the run, nested whole."""
    d = crane_diags(client, uri)
    return decode_params(d[0].data, DiagnosticData).sandbox if d and d[0].data else None


def with_marker(marker: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if marker.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                    out.append(int(p))
            except OSError:
                pass
    return out


async def test_miniature_then_background_full_run(client, bg_kernel, notebook_path):
    bg_kernel.run(LONG.replace("df['missing_col']", "pass"))  # the user ran the slow part: the watcher timed it
    nb = Notebook(client, notebook_path, [LONG.replace("df['missing_col']", "pass"), LONG])
    await attach(client, nb, bg_kernel)
    # cell 2's text never ran, but cell 1's did: same loop. Cell 2 gets a miniature run first (the budget is 1 s)
    v = await wait_for(lambda: sandbox_data(client, nb.cells[1]), timeout=60, what="a sandbox verdict on cell 2")
    assert v.verdict == "crash" and (v.mode == "layered" or v.scale == "full"), v
    d = crane_diags(client, nb.cells[1])[0]
    assert d.code == "sandbox" and d.message.startswith("KeyError") and d.range.start.line == 4
    if v.scale == "miniature":
        assert any(k.name == "df" and k.rows < k.of for k in v.kept), v
        assert d.data["confidence"] == 0.95
        # then the background full-size run replaces it
        v = await wait_for(lambda: (x := sandbox_data(client, nb.cells[1])) and x.scale == "full" and x,
                           timeout=90, what="the background full run")
    assert v.verdict == "crash" and v.scale == "full"
    assert crane_diags(client, nb.cells[1])[0].data["confidence"] == 1.0
    titles = [r[0].title for r in client.progress_reports.values() if r and isinstance(r[0], types.WorkDoneProgressBegin)]
    assert "CRANE: test-running cell 2" in titles, titles
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=nb.cells[1]), position=types.Position(1, 15))
    )
    assert hover is not None and "Speculative run" in hover.contents.value and "KeyError" in hover.contents.value


def _bg_progress_open(client, cell_number: int) -> bool:
    title = f"CRANE: test-running cell {cell_number}"
    return any(r and isinstance(r[0], types.WorkDoneProgressBegin) and r[0].title == title
               and not isinstance(r[-1], types.WorkDoneProgressEnd) for r in client.progress_reports.values())


def _gone(pids: list[int], marker: str) -> bool:
    def alive(pid: int) -> bool:
        try:
            return marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            return False
    return not any(alive(p) for p in pids)


def _slow(marker: str) -> str:
    return ("import subprocess, time\n"
            f"p = subprocess.Popen(['sh', '-c', 'sleep 600; true', '{marker}'])\n"
            "time.sleep(500)\n")  # outlives every wait below: only a stop ends it


async def _running_background(client, marker: str) -> list[int]:
    """The pids of the background run's program once it runs (the 1 s speculative runs have ended)."""
    await wait_for(lambda: _bg_progress_open(client, 1) and with_marker(marker), timeout=90,
                   what="the background run and its program")
    return with_marker(marker)


async def test_background_run_stops_on_edit_and_when_a_cell_runs(client, bg_kernel, notebook_path):
    first, second = (f"crane-marker-{uuid.uuid4().hex}" for _ in range(2))
    nb = Notebook(client, notebook_path.with_name("stop.ipynb"), [_slow(first)])
    await attach(client, nb, bg_kernel)
    pids = await _running_background(client, first)
    nb.set_text(0, _slow(second))  # an edit stops the run of the old text at once
    # "at once": ended by the stop, long before the cell's own end (a 15 s bound measured the machine's load)
    await wait_for(lambda: _gone(pids, first), timeout=60, what="the background run's processes ending on an edit")
    assert with_marker(first) == []
    pids = await _running_background(client, second)  # the new text gets its own background run
    bg_kernel.run("x = 1")  # a user run stops it at once
    await wait_for(lambda: _gone(pids, second), timeout=60, what="the background run's processes ending on a user run")
    nb.set_text(0, "x = 3\n")  # nothing left to run in the background
    await wait_for(lambda: with_marker(second) == [], timeout=30, what="every process of the cell's runs gone")
    await wait_for(lambda: not _bg_progress_open(client, 1), timeout=60, what="the progress ending")

"""`crane check --mode auto`: how the sandbox reached each verdict is in the report (sandboxMode, sandboxScale,
what a miniature kept), file writes happen in the private layer only, the recorded timing of a long cell
(JupyterLab / nbclient `metadata.execution`) sends it straight to a miniature run, and
`--sandbox-layer blocking` forces the fallback confinement."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from crane.notebook.model import load_notebook

from .conftest import make_notebook

SETUP = ("import time, numpy as np, pandas as pd\n"
         "df = pd.DataFrame({'a': np.arange(20000), 'k': np.arange(20000) % 3})", 1)
WRITES = ("df.to_csv('out.csv')\nback = pd.read_csv('out.csv')\nback['nope']", None)
SLOW = ("for _, r in df.iterrows():\n    time.sleep(0.002)\ndf['nope']", None)  # about 40 s at full size


def check(nb, *args, env=None):
    full = {**os.environ, **(env or {})}
    res = subprocess.run([sys.executable, "-m", "crane", "check", str(nb), "--json", *args], capture_output=True,
                         text=True, timeout=300, env=full)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)["notebooks"][0]["cells"]


def test_report_says_how_the_sandbox_decided(nb_dir):
    nb = make_notebook(nb_dir / "w.ipynb", [SETUP, WRITES])
    [cell] = check(nb, "--budget", "20")
    assert cell["sandbox"] == "crash" and cell["findings"][0]["ename"] == "KeyError", cell
    assert cell["sandboxMode"] == "layered" and cell["sandboxScale"] == "full" and cell["decidedBy"] == "sandbox"
    assert not (nb_dir / "out.csv").exists()  # the write happened in the private layer only
    [cell] = check(nb, "--budget", "20", "--sandbox-layer", "blocking")
    assert cell["sandbox"] == "blocked" and cell["sandboxMode"] == "blocking", cell
    assert "asked for" in cell["sandboxModeReason"]
    assert not (nb_dir / "out.csv").exists()


def test_recorded_timing_sends_a_long_cell_to_a_miniature(nb_dir):
    nb = make_notebook(nb_dir / "s.ipynb", [SETUP, SLOW])
    doc = json.loads(nb.read_text())
    doc["cells"][1]["metadata"]["execution"] = {"iopub.execute_input": "2025-01-01T10:00:00.000Z",
                                                "shell.execute_reply": "2025-01-01T10:00:41.500Z"}
    nb.write_text(json.dumps(doc))
    assert load_notebook(nb).cell(2).recorded_s == 41.5
    [cell] = check(nb, "--budget", "10")
    assert cell["sandbox"] == "crash" and cell["sandboxScale"] == "miniature", cell
    assert cell["findings"][0]["ename"] == "KeyError" and cell["findings"][0]["confidence"] == 0.95
    [kept] = cell["sandboxKept"]
    assert kept["name"] == "df" and kept["of"] == 20000 and kept["rows"] < 2000
    assert any("miniature run: kept" in e for e in cell["findings"][0]["evidence"])


def test_an_endless_cell_is_unknown_not_no_crash(nb_dir):
    nb = make_notebook(nb_dir / "loop.ipynb", [("x = 1", 1), ("while True:\n    x += 1", None)])
    [cell] = check(nb, "--budget", "2")
    assert cell["sandbox"] == "timeout" and cell["prediction"] == "unknown" and not cell.get("findings"), cell
    res = subprocess.run([sys.executable, "-m", "crane", "check", str(nb), "--budget", "2"], capture_output=True,
                         text=True, timeout=300)
    assert "cell 2: unknown: neither the kernel's facts nor a sandbox run decided" in res.stdout, res.stdout


def test_sandbox_portable_decides_with_the_portable_sandbox(nb_dir):
    """`--sandbox portable`: the same verdict from the portable sandbox (no fork of the kernel, no OS confinement),
    the write in the run's private folder only, and the report says which sandbox and layers ran."""
    nb = make_notebook(nb_dir / "p.ipynb", [SETUP, WRITES])
    [cell] = check(nb, "--budget", "30", "--sandbox", "portable")
    assert cell["sandbox"] == "crash" and cell["findings"][0]["ename"] == "KeyError", cell
    assert cell["sandboxMode"] == "portable" and cell["decidedBy"] == "sandbox", cell
    assert cell["sandboxTransplant"]["layers"] == ["call guard", "audit hook"], cell
    assert not (nb_dir / "out.csv").exists()  # the write happened in the run's private folder only

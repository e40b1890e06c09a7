"""`crane check --mode auto`: how the sandbox reached each verdict is in the report (each cell's `sandbox`, the
sandbox's record of the run, decoded here into `SandboxVerdict`: its mode, scale, what a miniature kept), file writes happen in the private layer only, the recorded timing of a long cell
(JupyterLab / nbclient `metadata.execution`) sends it straight to a miniature run, and
`--sandbox-layer blocking` forces the fallback confinement."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgspec

from crane.commands.check_text import render_text
from crane.commands.output import CheckReport
from crane.engine import CellResult
from crane.notebook.model import load_notebook
from crane.sandbox.verdict import SandboxVerdict
from crane.sandbox.worker.linux import linux_layer_available
from crane.sandbox.worker.seccomp import pc_arch

from .conftest import make_notebook

SETUP = ("import time, numpy as np, pandas as pd\n"
         "df = pd.DataFrame({'a': np.arange(20000), 'k': np.arange(20000) % 3})", 1)
WRITES = ("df.to_csv('out.csv')\nback = pd.read_csv('out.csv')\nback['nope']", None)
SLOW = ("for _, r in df.iterrows():\n    time.sleep(0.002)\ndf['nope']", None)  # about 40 s at full size


def check(nb, *args, env=None) -> list[CellResult]:
    """The cells of `crane check --json`'s report, decoded (strictly) into the Structs it is made of: each cell's
    `sandbox` is the one record (`SandboxVerdict`), nested."""
    return check_report(nb, *args, env=env).notebooks[0].cells


def check_report(nb, *args, env=None) -> CheckReport:
    """`check`'s report whole (the text report is rendered from it: `render_text`)."""
    full = {**os.environ, **(env or {})}
    res = subprocess.run([sys.executable, "-m", "crane", "check", str(nb), "--json", *args], capture_output=True,
                         text=True, timeout=300, env=full)
    assert res.returncode in (0, 1), res.stderr
    report = msgspec.json.decode(res.stdout, type=CheckReport)
    cells = report.notebooks[0].cells
    raw = json.loads(res.stdout)["notebooks"][0]["cells"]
    for cell, wire in zip(cells, raw, strict=True):
        assert cell.sandbox is None or isinstance(cell.sandbox, SandboxVerdict)
        assert not [k for k in wire if k.startswith("sandbox") and k != "sandbox"], wire  # no flat copies
        if cell.sandbox is not None:  # the record, whole: it decodes and encodes back to the same JSON
            assert msgspec.to_builtins(cell.sandbox) == wire["sandbox"], wire
    return report


def test_report_says_how_the_sandbox_decided(nb_dir):
    nb = make_notebook(nb_dir / "w.ipynb", [SETUP, WRITES])
    [cell] = check(nb, "--budget", "20")
    v = cell.sandbox
    assert v is not None and v.verdict == "crash" and cell.findings[0].ename == "KeyError", cell
    assert v.mode == "layered" and v.scale == "full" and cell.decided_by == "sandbox"
    assert v.ename == "KeyError" and v.line == 3, v  # the run's own exception and line, in the record
    assert not (nb_dir / "out.csv").exists()  # the write happened in the private layer only
    [cell] = check(nb, "--budget", "20", "--sandbox-layer", "blocking")
    v = cell.sandbox
    assert v is not None and v.verdict == "blocked" and v.mode == "blocking", cell
    assert v.mode_reason and "asked for" in v.mode_reason
    assert not (nb_dir / "out.csv").exists()


def test_recorded_timing_sends_a_long_cell_to_a_miniature(nb_dir):
    nb = make_notebook(nb_dir / "s.ipynb", [SETUP, SLOW])
    doc = json.loads(nb.read_text())
    doc["cells"][1]["metadata"]["execution"] = {"iopub.execute_input": "2025-01-01T10:00:00.000Z",
                                                "shell.execute_reply": "2025-01-01T10:00:41.500Z"}
    nb.write_text(json.dumps(doc))
    assert load_notebook(nb).cell(2).recorded_s == 41.5
    [cell] = check(nb, "--budget", "10")
    v = cell.sandbox
    assert v is not None and v.verdict == "crash" and v.scale == "miniature", cell
    assert cell.findings[0].ename == "KeyError" and cell.findings[0].confidence == 0.95
    [kept] = v.kept
    assert kept.name == "df" and kept.of == 20000 and kept.rows < 2000
    assert any("miniature run: kept" in e for e in cell.findings[0].evidence)


def test_an_endless_cell_is_unknown_not_no_crash(nb_dir):
    nb = make_notebook(nb_dir / "loop.ipynb", [("x = 1", 1), ("while True:\n    x += 1", None)])
    report = check_report(nb, "--budget", "2")
    [cell] = report.notebooks[0].cells
    assert cell.sandbox is not None and cell.sandbox.verdict == "timeout", cell
    assert cell.prediction == "unknown" and not cell.findings, cell
    text = render_text(report)  # what the text report prints for this run (the CLI's text path renders the same)
    assert "cell 2: unknown: neither the kernel's facts nor a sandbox run decided" in text, text


def test_sandbox_portable_decides_with_the_portable_sandbox(nb_dir):
    """`--sandbox portable`: the same verdict from the portable sandbox (no fork of the kernel; Landlock under it),
    the write in the run's private folder only, and the report says which sandbox and layers ran."""
    nb = make_notebook(nb_dir / "p.ipynb", [SETUP, WRITES])
    [cell] = check(nb, "--budget", "30", "--sandbox", "portable")
    v = cell.sandbox
    assert v is not None and v.verdict == "crash" and cell.findings[0].ename == "KeyError", cell
    assert v.mode == "portable" and cell.decided_by == "sandbox", cell
    os_layer = (["landlock"] + (["seccomp"] if pc_arch() else [])  # Linux's OS layer under the guard
                if linux_layer_available() is None else [])
    assert v.transplant is not None and v.transplant.layers == ["call guard", "audit hook", *os_layer], cell
    assert not (nb_dir / "out.csv").exists()  # the write happened in the run's private folder only

"""`crane bench --mode auto` reports the sandbox's verdicts by mode (fork confinements and transplant runs) and
the share it decided: a JAX case (the kernel cannot be forked: transplant) and a numpy case (forked), each with
a crashing and a clean variant, on a kernel of today's environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec

from crane.commands.bench import BenchReport, render_text

from ..kernel_envs import require_today_python


def _case(root: Path, cid: str, library: str, history: str, buggy: str, fixed: str, ename: str) -> None:
    d = root / cid
    d.mkdir()

    def nb(target: str) -> dict:
        cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": history},
                 {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": target}]
        return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

    (d / "buggy.ipynb").write_text(json.dumps(nb(buggy)))
    (d / "fixed.ipynb").write_text(json.dumps(nb(fixed)))
    (d / "case.json").write_text(json.dumps({
        "id": cid, "library": library, "root_cause": "API misuse", "crash_type": "shape",
        "variants": {
            "buggy": {"notebook": "buggy.ipynb", "target_cell": 2, "expect": {"crash": True, "ename": ename}},
            "fixed": {"notebook": "fixed.ipynb", "target_cell": 2, "expect": {"crash": False}},
        },
    }))


def test_auto_bench_prints_the_verdicts_by_sandbox_mode_and_the_share_decided(tmp_path):
    python = require_today_python()
    _case(tmp_path, "jax_reshape", "jax", "import jax.numpy as jnp\nw = jnp.ones((2, 3))", "v = w.reshape(5)\nv",
          "v = w.reshape(6)\nv", "TypeError")
    _case(tmp_path, "numpy_reshape", "numpy", "import numpy as np\na = np.ones((2, 3))", "b = a.reshape(5)\nb",
          "b = a.reshape(6)\nb", "ValueError")
    res = subprocess.run([sys.executable, "-m", "crane", "bench", str(tmp_path), "--mode", "auto", "--python", python,
                          "--json", "--quiet"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["overall"]["accuracy"] == 1.0 and data["sandboxDecided"] == 1.0, data
    by = data["sandboxByMode"]
    assert by["transplant"] == {"crash": 1, "no-crash": 1}, by
    assert set(by) == {"transplant", "blocking"} and by["blocking"] == {"crash": 1, "no-crash": 1}, by
    modes = {r["case"]: r["sandbox"]["mode"] for r in data["results"]}
    assert modes == {"jax_reshape": "transplant", "numpy_reshape": "blocking"}, modes
    text = render_text(msgspec.convert(data, BenchReport))
    assert "decided by the sandbox: 4/4 (100.0%)" in text, text
    assert "sandbox by mode:" in text and "  transplant      2: crash 1, no-crash 1 (decided 2/2)" in text, text

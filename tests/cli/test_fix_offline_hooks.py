"""Issue 41 through `crane fix NB --cell N --offline --json`: a crashing cell that keeps a hook on past CRANE's
epilogue — a tracer on CRANE's frames (IPython 8 and 9 kernels), `sys.monitoring` callbacks (3.12 and 3.13
kernels), or, on 3.13 (PEP 667), writes into CRANE's frames' locals — is never reported clean: each makes every
record it can reach say no-crash and, where it can, the sealed read's code clean (the attacks of
tests/sandbox/test_sealed_session_state.py, which forged fork sessions' replies before they ran untraced and were
checked from their constants). The notebook on disk is untouched."""

from __future__ import annotations

import json

import pytest

from crane.cli import main
from crane.sandbox.options import SandboxOptions, configure

from ..kernel_envs import kernel_python, python_kernel
from ..sandbox.test_sealed_session_state import COMMON, MONITOR, TRACER, WRITER
from .test_fix_offline import SALES, code, write

CRASHING = 'best = sales[sales["Total Gross"] > 2]\nprint(len(best))\n'
# (the notebook's cell runs in the replay kernel too, where no frame of CRANE's is below it)
SAFE = ("g = cranes[0].f_globals", "g = cranes[0].f_globals if cranes else {}")
CASES = {
    ("ipython8", "tracer"): TRACER, ("ipython9", "tracer"): TRACER,
    ("3.12", "monitoring"): MONITOR, ("3.13", "monitoring"): MONITOR,
    ("3.13", "write"): WRITER + "_write_locals()\n",
}


def _python(kernel: str) -> str:
    return kernel_python(kernel) if kernel.startswith("ipython") else python_kernel(kernel)


@pytest.mark.parametrize(("kernel", "attack"), list(CASES))
def test_a_crash_with_a_hook_kept_past_the_epilogue_is_never_reported_clean(tmp_path, capsys, kernel, attack):
    python = _python(kernel)
    cell = CASES[kernel, attack].replace(COMMON, COMMON.replace(*SAFE)) + CRASHING
    path = write(tmp_path / "hooked.ipynb", [*SALES[:2], code(cell)])
    before = path.read_bytes()
    try:
        main(["fix", str(path), "--cell", "3", "--offline", "--json", "--python", python, "--sandbox", "os"])
    finally:
        configure(SandboxOptions())
    r = json.loads(capsys.readouterr().out)["report"]
    assert r["status"] != "clean", r
    assert path.read_bytes() == before

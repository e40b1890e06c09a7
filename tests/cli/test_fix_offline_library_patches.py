"""Issue 41 through `crane fix NB --cell N --offline --json` (IPython 8 and 9 replay kernels): a crashing cell that
changes library code on CRANE's way — IPython's builtin trap made to swallow the exception going through it — or
follows an executed cell that made `ast.parse` parse every later cell to nothing is never reported clean (both were:
the fix session's run of the cell came back `no-crash`; tests/sandbox/test_trap_exit_forge.py and test_parse_forge.py have the paths). The
notebook on disk is untouched."""

from __future__ import annotations

import json

import pytest

from crane.cli import main
from crane.sandbox.options import SandboxOptions, configure

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox.test_parse_forge import PATCHES
from ..sandbox.test_trap_exit_forge import PATCH
from .test_fix_offline import SALES, code, write

CRASHING = 'best = sales[sales["Total Gross"] > 2]\nprint(len(best))\n'
# (the patch in the crashing cell itself, or in the executed cell before it: the replay kernel's state)
ATTACKS = {"trap": (PATCH, ""), "parse": ("", PATCHES["parse"])}


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("kernel", KERNEL_ENVS)
def test_a_crash_after_a_library_patch_on_cranes_way_is_never_reported_clean(tmp_path, capsys, kernel, attack):
    in_cell, executed = ATTACKS[attack]
    first = code(executed + "".join(SALES[1]["source"]), SALES[1]["execution_count"])
    path = write(tmp_path / "patched.ipynb", [SALES[0], first, code(in_cell + CRASHING)])
    before = path.read_bytes()
    try:
        main(["fix", str(path), "--cell", "3", "--offline", "--json", "--python", kernel_python(kernel),
              "--sandbox", "os"])
    finally:
        configure(SandboxOptions())
    r = json.loads(capsys.readouterr().out)["report"]
    assert r["status"] != "clean", r
    assert path.read_bytes() == before

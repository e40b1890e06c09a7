"""Issue 41 through `crane fix NB --cell N --offline --json` (S7 of round 5): a crashing cell that rewrites CRANE's
reply writer (S1) and writes forged "no-crash" records on every descriptor it finds is never reported clean, on
IPython 8 and 9 kernels, forked and portable; the same notebook without the forging lines is `fixed` as before.
The notebook on disk is untouched."""

from __future__ import annotations

import json

import pytest

from crane.cli import main
from crane.sandbox.options import SandboxOptions, configure

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox.forgeries import REACH, S1
from .test_fix_offline import SALES, code, write

CRASHING = 'best = sales[sales["Total Gross"] > 2]\nprint(len(best))\n'
FORGING = "import os, json\n" + S1 + REACH["fstat-fifo"] + CRASHING


@pytest.mark.parametrize("sandbox", ["os", "portable"])
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_forging_crash_is_never_reported_clean(tmp_path, capsys, kernel_env, sandbox):
    python = kernel_python(kernel_env)
    path = write(tmp_path / "forging.ipynb", [*SALES[:2], code(FORGING)])
    before = path.read_bytes()
    try:
        main(["fix", str(path), "--cell", "3", "--offline", "--json", "--python", python, "--sandbox", sandbox])
    finally:
        configure(SandboxOptions())
    r = json.loads(capsys.readouterr().out)["report"]
    assert r["status"] != "clean", r
    assert path.read_bytes() == before
    honest = write(tmp_path / "honest.ipynb", [*SALES[:2], code(CRASHING)])
    try:
        assert main(["fix", str(honest), "--cell", "3", "--offline", "--json", "--python", python,
                     "--sandbox", sandbox]) == 0
    finally:
        configure(SandboxOptions())
    r = json.loads(capsys.readouterr().out)["report"]
    assert r["status"] == "fixed" and r["crash"]["ename"] == "KeyError", r


# the newer families (issue 41): a crashing cell that makes CRANE's record say no-crash (its exception's text) and
# reaches the seal's own C call — its pointer class's `__call__`, an argument converter (`c_ulong.from_param` with
# `argtypes` set back), or a Python signal handler set while the record is made that seals CRANE's bytes clean
# itself (tests/sandbox/test_seal_call.py): each came back `no-crash` on the fork path before, and `crane fix` then
# had no crash to fix
@pytest.mark.parametrize("attack", ["call", "from_param", "signal"])
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_crash_that_reaches_the_seals_call_is_never_reported_clean(tmp_path, capsys, kernel_env, attack):
    from ..sandbox.test_seal_call import ATTACKS, RECORD

    cell = RECORD + ATTACKS[attack] + "try:\n    " + CRASHING.replace("\n", "\n    ").rstrip() + \
        "\nexcept KeyError:\n    raise E()\n"
    path = write(tmp_path / "sealing.ipynb", [*SALES[:2], code(cell)])
    before = path.read_bytes()
    try:
        main(["fix", str(path), "--cell", "3", "--offline", "--json", "--python", kernel_python(kernel_env),
              "--sandbox", "os"])
    finally:
        configure(SandboxOptions())
    r = json.loads(capsys.readouterr().out)["report"]
    assert r["status"] != "clean", r
    assert path.read_bytes() == before

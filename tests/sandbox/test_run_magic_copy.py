"""`%run -i script.py` on the copy paths (round 16, F12): the script runs in the notebook's namespace, so it may read a
kernel name the cell never names, which the copy does not hold. IPython's `%run` catches the script's NameError and
shows it, so the cell ends clean while its record is that shown exception; the worker makes it `unavailable` ("the
cell reads a name of the kernel it does not name"), and the daemon took that record under the clean seal for a
forgery: `blocked`, "the cell wrote into CRANE's result channel", on the one-shot transplant and portable runs
(IPython 8 and 9), where the kernel runs the cell clean. Now: `unavailable` naming the name on one-shot runs, a
likely crash naming it on sessions, never `blocked`, never a certain crash; the cell that names the script's
name too gets the kernel's verdict (`no-crash`). A record the seal does not cover, or `no-crash` under a raise,
stays `blocked` (pure `assemble` checks below; the end-to-end forgeries: test_seal_*.py, test_*forge*.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import pytest

from crane.sandbox.assemble import FORGED, SEAL_CLEAN, SEAL_RAISED, assemble
from crane.sandbox.channel import RunOutcome
from crane.sandbox.verdict import ExitStatus

from . import end_paths
from .end_paths import PATHS, path_verdict

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
COPY_PATHS = [p for p in PATHS if not p.startswith("fork")]
ONE_SHOT = ("transplant", "portable")
HISTORY = "import pandas as pd\nrm_df = pd.DataFrame({'a': [1, 2]})\n"
SCRIPTS = {
    "reads.py": "print(rm_df.shape)\n",  # (a kernel name the cell does not name)
    "calls.py": "def rm_shape():\n    return rm_df.shape\nprint(rm_shape())\n",  # (read in the script's function)
    "own.py": "rm_z = 2\nprint(rm_z * 2)\n",  # (reads nothing of the kernel's)
}


@pytest.fixture(scope="module")
def scripts(pk):
    """The scripts, in a folder of the kernel's working directory (made before any run: the runs change no file)."""
    folder = pk["work"] / "rm_scripts"
    folder.mkdir()
    for name, text in SCRIPTS.items():
        (folder / name).write_text(text)
    assert pk["conn"].run_cell(HISTORY, timeout=120).status == "ok"
    yield "rm_scripts"
    shutil.rmtree(folder, ignore_errors=True)


def _served(sb) -> None:
    nxt = sb.run("rm_n = 1 + 1\nassert rm_n == 2")
    assert nxt.verdict == "no-crash", nxt


def _honest(v, path: str) -> None:
    """Never the channel's forgery, never a certain crash: `unavailable` (one-shot) or a likely crash (session)
    naming the kernel's name the copy did not hold."""
    assert v.verdict != "blocked" and FORGED not in (v.reason or ""), v
    assert not (v.verdict == "crash" and v.certain), v
    if path in ONE_SHOT:
        assert v.verdict == "unavailable" and "'rm_df'" in (v.reason or ""), v
    else:
        assert (v.verdict, v.ename) == ("crash", "NameError") and "'rm_df'" in (v.reason or ""), v


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
@pytest.mark.parametrize("script", ["reads.py", "calls.py"])
@pytest.mark.parametrize("path", COPY_PATHS)
def test_a_script_reading_a_kernel_name_the_cell_does_not_name(pk, scripts, path, script):
    cell = f"%run -i {scripts}/{script}"
    _honest(path_verdict(pk, path, cell, _served), path)
    assert pk["conn"].run_cell(cell, timeout=60).status == "ok"  # (the kernel runs it clean)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")
@pytest.mark.parametrize("path", COPY_PATHS)
def test_the_copy_holding_what_the_script_reads_gets_the_kernels_verdict(pk, scripts, path):
    for cell in (f"rm_df.shape\n%run -i {scripts}/reads.py", f"%run -i {scripts}/own.py", f"%run {scripts}/own.py"):
        v = path_verdict(pk, path, cell, _served)
        assert (v.verdict, v.ename) == ("no-crash", None), (cell, v)


# what the daemon takes (pure: the record as a copy worker writes and seals it)
SETUP = {"event": "setup", "mode": "portable", "reason": None, "steps": {"total": 1.0}}
CELL = {"event": "cell"}
UNCOPIED = {"verdict": "unavailable", "reason": "the cell reads a name of the kernel it does not name (name 'rm_df' "
                                                "is not defined): it was not copied"}


def _bytes(*lines: dict) -> bytes:
    return b"".join((json.dumps(x) + "\n").encode() for x in lines)


def _sealed(code: int, crane_wrote: bytes) -> ExitStatus:
    digest = int.from_bytes(hashlib.blake2b(crane_wrote, digest_size=8).digest(), "little")
    return ExitStatus(signal=9, sealed=[code, digest], checked=True, by_parent=True)


@pytest.mark.parametrize("code", [SEAL_CLEAN, SEAL_RAISED])
def test_an_uncopied_name_sealed_clean_or_raised_is_unavailable(code):
    data = _bytes(SETUP, CELL, UNCOPIED)
    v = assemble(RunOutcome(data, "eof", _sealed(code, data), "", ""), 10.0, 2048)
    assert v.verdict == "unavailable" and "'rm_df'" in (v.reason or ""), v
    assert v.integrity is not None and v.integrity.channel_checked, v


def test_bytes_the_seal_does_not_cover_stay_blocked():
    crane = _bytes(SETUP, CELL, UNCOPIED)
    for data in (crane + _bytes(UNCOPIED), _bytes(SETUP, CELL, {"verdict": "no-crash", "elapsed_ms": 1.0})):
        v = assemble(RunOutcome(data, "eof", _sealed(SEAL_CLEAN, crane), "", ""), 10.0, 2048)
        assert v.verdict == "blocked" and FORGED in (v.reason or ""), v

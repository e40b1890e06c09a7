"""A verdict the cell cannot forge (issue 41): one-shot runs on IPython 8 and 9 kernels, forked (blocking and
layered) and portable. A cell that writes a "no-crash" record on every descriptor it can reach (fstat, /proc/self/fd,
/dev/fd, every number up to 1024, the file objects `gc` finds) and then raises never comes back `no-crash`: the
record is final only once the channel has ended, and any line the cell put there makes the run `blocked` ("the cell
wrote into CRANE's result channel"). The honest cells keep their real verdicts; nothing outside changes."""

from __future__ import annotations

from typing import Any

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.assemble import FORGED
from crane.sandbox.options import SandboxOptions

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .forgeries import _LINE, EVERY_FUNCTION, JSON_DUMPS, REACH, S1

SETUP = "import os, json\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n"

PATHS: dict[str, dict[str, Any]] = {"blocking": {"layer": "blocking"}, "layered": {"layer": "layered"},
         "portable": {"sandbox": SandboxOptions(confinement="portable")}}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def ik(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _run(ik, source: str, path: str):
    conn = ik["conn"]
    before = (tree_hash(ik["work"]), tree_hash(ik["outside"]))
    with Untouched(conn) as watch:
        v = speculate(conn, source, 60.0, **PATHS[path])
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    assert (tree_hash(ik["work"]), tree_hash(ik["outside"])) == before, v
    if path == "portable":
        assert v.mode == "portable", v
    return v


@pytest.mark.parametrize("path", list(PATHS))
def test_honest_cells_keep_their_verdicts_and_say_the_channel_was_checked(ik, path):
    v = _run(ik, "y = df['a'].sum()", path)
    assert v.verdict == "no-crash", v
    assert v.integrity is not None and v.integrity.channel_checked and v.integrity.writer == "cell-process", v
    v = _run(ik, "y = df['missing']", path)
    assert (v.verdict, v.ename) == ("crash", "KeyError"), v
    assert v.integrity is not None and v.integrity.channel_checked, v


@pytest.mark.parametrize("reach", list(REACH))
@pytest.mark.parametrize("path", list(PATHS))
def test_a_record_the_cell_writes_is_never_the_verdict(ik, path, reach):
    v = _run(ik, REACH[reach] + "1/0\n", path)
    assert v.verdict != "no-crash", v
    if v.verdict == "blocked" and (v.reason or "").startswith(FORGED):  # it reached the channel: said so
        assert v.integrity is not None and not v.integrity.channel_checked, v
    elif v.verdict == "blocked":  # the sandbox refused how it looked (the portable guard: gc.get_objects)
        assert (v.reason or "").startswith("crane sandbox: "), v
    else:  # it found no channel to write on: the real crash
        assert (v.verdict, v.ename) == ("crash", "ZeroDivisionError"), v


@pytest.mark.parametrize("path", ["blocking", "layered"])
def test_a_forged_record_after_an_honest_run_is_caught_too(ik, path):
    """The cell writes a crash record and ends clean: the forged line is still an extra line."""
    line = "(json.dumps({'verdict': 'crash', 'ename': 'X', 'elapsed_ms': 1.0}) + '\\n').encode()"
    v = _run(ik, REACH["fstat-fifo"].replace(_LINE, line) + "x = 1\n", path)
    assert v.verdict == "blocked" and (v.reason or "").startswith(FORGED), v


def _attacks():
    return {"S1-reply-writer": S1 + "raise KeyError('orig')", "every-crane-function": EVERY_FUNCTION + "1/0",
            "json-dumps": JSON_DUMPS + "1/0"}


@pytest.mark.parametrize("attack", list(_attacks()))
@pytest.mark.parametrize("path", list(PATHS))
def test_a_cell_that_rewrites_cranes_code_gets_no_verdict(ik, path, attack):
    """Rebinding the record's writer, every function of CRANE's modules or json.dumps, then crashing: never
    no-crash (blocked: the process wrote no record and said why by how it ended; or the real crash)."""
    v = _run(ik, _attacks()[attack], path)
    assert v.verdict in ("blocked", "crash"), v
    if v.verdict == "crash":
        assert v.ename in ("KeyError", "ZeroDivisionError"), v

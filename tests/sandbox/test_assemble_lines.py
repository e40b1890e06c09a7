"""The verdict of a run from its lines and how it ended (crane.sandbox.assemble): a process that died before the
cell's code began (the sandbox's setup, shrinking, loading a transplant's copy of the state) is `unavailable`;
the same death once the cell's "cell" line is out is the cell's crash."""

from __future__ import annotations

import json
import signal

from crane.sandbox.assemble import assemble
from crane.sandbox.channel import RunOutcome
from crane.sandbox.verdict import ExitStatus

SETUP = json.dumps({"event": "setup", "mode": "layered", "steps": {"total": 3.0}}).encode() + b"\n"


def _died(data: bytes, sig: int = signal.SIGSEGV):
    return assemble(RunOutcome(data, "exit", ExitStatus(signal=sig), "", ""), 10.0, 2048)


def test_a_death_before_the_cell_began_is_not_the_cells():
    v = _died(SETUP)
    assert v.verdict == "unavailable" and "before the cell started" in (v.reason or "") and "SIGSEGV" in v.reason, v
    assert _died(b"").verdict == "unavailable"  # died during the setup itself


def test_the_same_death_once_the_cell_runs_is_a_crash():
    v = _died(SETUP + b'{"event": "cell"}\n')
    assert v.verdict == "crash" and v.ename == "DeadKernelError", v


def test_a_timeout_stays_a_timeout_either_way():
    assert _died(SETUP, signal.SIGXCPU).verdict == "timeout"
    assert _died(SETUP + b'{"event": "cell"}\n', signal.SIGXCPU).verdict == "timeout"

"""How the daemon reads a one-shot run's seal (issue 41, `assemble.py`): the record counts only sealed over exactly the
channel's bytes, "no-crash" only under the clean code; a run that ended unsealed after its cell began is "the cell
ends the kernel's process"; a parent that could not look in /proc (`checked: false`) leaves the record as before.
Pure: what the kernel side writes is built here as it writes it (the end-to-end runs are test_verdict_integrity.py)."""

from __future__ import annotations

import hashlib
import json

import pytest

from crane.sandbox.assemble import FORGED, SEAL_CLEAN, SEAL_ENDS, SEAL_RAISED, SEAL_RECORD, SEAL_TAMPERED, assemble
from crane.sandbox.channel import RunOutcome
from crane.sandbox.verdict import ExitStatus

SETUP = {"event": "setup", "mode": "blocking", "reason": None, "steps": {"total": 1.0}}
CELL = {"event": "cell"}
CLEAN = {"verdict": "no-crash", "elapsed_ms": 1.0}
RAISED = {"verdict": "crash", "ename": "KeyError", "evalue": "'a'", "elapsed_ms": 1.0}


def _bytes(*lines: dict) -> bytes:
    return b"".join((json.dumps(x) + "\n").encode() for x in lines)


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _run(data: bytes, status: ExitStatus | None, how: str = "eof"):
    return assemble(RunOutcome(data, how, status, "", ""), 10.0, 2048)


def _sealed(code: int, crane_wrote: bytes, *, checked: bool = True) -> ExitStatus:
    return ExitStatus(signal=9, sealed=[code, _digest(crane_wrote)], checked=checked, by_parent=True)


@pytest.mark.parametrize("code,record,verdict", [(SEAL_CLEAN, CLEAN, "no-crash"), (SEAL_RAISED, RAISED, "crash")])
def test_a_record_sealed_over_exactly_the_channel_counts(code, record, verdict):
    data = _bytes(SETUP, CELL, record)
    v = _run(data, _sealed(code, data))
    assert v.verdict == verdict and v.integrity is not None and v.integrity.channel_checked, v


def test_a_line_the_cell_added_is_not_what_crane_sealed():
    crane = _bytes(SETUP, CELL, RAISED)
    v = _run(_bytes(SETUP, CELL, CLEAN) + _bytes(RAISED), _sealed(SEAL_RAISED, crane))
    assert v.verdict == "blocked" and FORGED in (v.reason or "") and not v.integrity.channel_checked, v


@pytest.mark.parametrize("code", [SEAL_RAISED, SEAL_RECORD])
def test_no_crash_only_where_the_cell_ended_clean(code):
    data = _bytes(SETUP, CELL, CLEAN)  # (even sealed over these bytes: CRANE's sealing reached another way)
    v = _run(data, _sealed(code, data))
    assert v.verdict == "blocked" and FORGED in (v.reason or ""), v


def test_sealed_as_ending_the_process_is_a_crash_whatever_the_channel_holds():
    v = _run(_bytes(SETUP, CELL, CLEAN), _sealed(SEAL_ENDS, _bytes(SETUP, CELL)))
    assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v


def test_sealed_as_tampered_is_blocked():
    v = _run(_bytes(SETUP, CELL), _sealed(SEAL_TAMPERED, _bytes(SETUP, CELL)))
    assert v.verdict == "blocked" and "CRANE's own code" in (v.reason or ""), v


@pytest.mark.parametrize("status", [ExitStatus(exitcode=0, checked=True), ExitStatus(exitcode=3, checked=True),
                                    ExitStatus(signal=6, checked=True), ExitStatus(signal=15, checked=True)])
def test_unsealed_after_the_cell_began_ends_the_kernel(status):
    v = _run(_bytes(SETUP, CELL, CLEAN), status)  # a forged record, then the process ended itself
    assert v.verdict in ("crash", "blocked") and v.verdict != "no-crash", v
    if status.signal is None or status.signal == 15:
        assert (v.verdict, v.ename) == ("crash", "DeadKernelError"), v


def test_unsealed_and_killed_at_the_deadline_is_a_timeout():
    v = _run(_bytes(SETUP, CELL, CLEAN), ExitStatus(signal=9, checked=True), how="deadline")
    assert v.verdict == "timeout", v


def test_before_the_cell_what_crane_wrote_stands_unsealed():
    v = _run(_bytes(SETUP, {"verdict": "unavailable", "reason": "sandbox setup failed: x"}),
             ExitStatus(exitcode=0, checked=True))
    assert v.verdict == "unavailable" and "setup failed" in (v.reason or ""), v


def test_a_parent_that_could_not_look_leaves_the_record_as_before():
    data = _bytes(SETUP, CELL, CLEAN)
    v = _run(data, ExitStatus(signal=9, checked=False, by_parent=True))
    assert v.verdict == "no-crash", v



@pytest.mark.parametrize("how,verdict", [("deadline", "timeout"), ("eof", "unavailable"), ("exit", "unavailable"),
                                         ("cancelled", "unavailable")])
def test_a_fork_run_whose_parent_never_said_how_it_ended_keeps_no_record(how, verdict):
    """The kernel's reaper is late (a loaded machine) or gone: the record on the channel may be the cell's own."""
    data = _bytes(SETUP, CELL, CLEAN)
    v = assemble(RunOutcome(data, how, None, "", ""), 10.0, 2048, expect_seal=True)
    assert v.verdict == verdict and v.integrity is not None and not v.integrity.channel_checked, v
    assert _run(data, None, how=how if how != "eof" else "exit").verdict in ("no-crash", verdict)  # (no seal: read)


@pytest.mark.parametrize("status,verdict", [(ExitStatus(exitcode=0, checked=None), "crash"),
                                            (ExitStatus(signal=9, checked=None), "timeout"),
                                            (ExitStatus(signal=9, checked=None, deadline=True), "timeout")])
def test_a_process_that_ended_before_its_parent_looked_is_unsealed(status, verdict):
    """It ended before saying its record was out: its parent never looked, and there is no seal to find."""
    v = assemble(RunOutcome(_bytes(SETUP, CELL, CLEAN), "eof", status, "", ""), 10.0, 2048, expect_seal=True)
    assert v.verdict == verdict and v.integrity is not None and not v.integrity.channel_checked, v

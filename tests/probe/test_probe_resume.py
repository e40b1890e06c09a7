"""Exact passes over large values, resumed across requests (kernel/scan.run_pass), on a real kernel of its own.

With `scan_slice_ms=0` every pass reads exactly one chunk per request, so how many requests a pass takes is
fixed by the data alone (never by the machine's speed). The answers before the last are partial (`resumable`,
the value `sampled`, NaN claimed only when seen) and the last equals a one-request exact answer; an execution
mid-pass starts it over (a mutation of rows already read is counted); a value the probe reads through a copy
(an n-D array that is not C-contiguous, a tensor) cannot be resumed, so it is read whole at once; the user's
kernel is untouched.
"""

from __future__ import annotations

import msgspec
import pytest

from crane.kernel.untouched import Untouched
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest, ProbeResult
from crane.probe.kernel.scan import CHUNK

from ..library_versions import HAS_TORCH
from .conftest import own_kernel, torch_only
from .no_time_cap import NO_TIME_CAP

ROWS = 300_000  # five chunks of a numeric column (more of an object column or of a block of columns)
SETUP = f"""
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
wide = pd.DataFrame(rng.random(({ROWS}, 8)), columns=[f"c{{i}}" for i in range(8)])  # strided columns
wide.iloc[{ROWS} - 2, 3] = np.nan  # c3: one NaN, in the last chunk
wide["city"] = rng.choice(np.array(["paris", "rome"], dtype=object), {ROWS})
wide.iloc[{ROWS} - 3, 8] = None  # city: one missing value, in the last chunk
wide.iloc[{ROWS} - 1, 5] = np.nan  # c5, a column the cell does not name: counted by its block's pass
fortran = np.asfortranarray(rng.random((700, 700)))  # flattened by a copy: nothing to resume
fortran[699, 699] = np.nan
"""
# a tensor where torch is installed (the kernel runs this interpreter; none from Python 3.12: pyproject.toml)
TORCH_SETUP = """
import torch
tensor = torch.rand(1_000_000)  # read through a new array each call: nothing to resume
tensor[-1] = float("nan")
"""
NAMES = ["wide", "fortran", *torch_only("tensor")]
REQUEST = ProbeRequest(names=NAMES, attrs=["wide.c3"], columns=["c3", "city"], scan_slice_ms=0)
# the reference answer: everything read in one request, with a time budget no loaded machine runs out of
ONE_GO = ProbeRequest(names=NAMES, attrs=["wide.c3"], columns=["c3", "city"], scan_slice_ms=1e6,
                      time_budget_ms=NO_TIME_CAP)
VOLATILE = ("elapsed_ms", "payload_bytes", "cached", "scanned")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    yield from own_kernel(tmp_path_factory, "resume", SETUP + (TORCH_SETUP if HAS_TORCH else ""))


@pytest.fixture
def probe(kernel) -> ProbeClient:
    return ProbeClient(kernel.connection)


def column(res: ProbeResult, name: str):
    return next(c for c in res.facts["wide"].columns or [] if c.name == name)


def stable(res: ProbeResult) -> dict:
    return {k: v for k, v in msgspec.to_builtins(res).items() if k not in VOLATILE}


def executed(kernel) -> None:
    """An execution: what the probe remembers (finished and unfinished passes) no longer applies."""
    assert kernel.connection.run_cell("pass").status == "ok"


def resume_all(probe: ProbeClient, request: ProbeRequest = REQUEST) -> list[ProbeResult]:
    answers = [probe.run(request, complete=False)]
    while answers[-1].resumable:
        assert len(answers) < 100, "a resumable pass must advance on every request"
        answers.append(probe.run(request, complete=False))
    return answers


def test_partial_answers_then_the_exact_one(kernel, probe):
    executed(kernel)
    exact = probe.run(ONE_GO, complete=False)
    assert not exact.resumable and not exact.time_capped and column(exact, "c3").n_nan == 1 and column(exact, "city").n_nan == 1
    assert column(exact, "c5").n_nan == 1 and exact.facts["wide"].n_nan == 3
    executed(kernel)
    answers = resume_all(probe)
    assert len(answers) >= -(-ROWS // CHUNK)  # c3 alone takes that many: one chunk per request
    executed(kernel)
    assert len(resume_all(probe)) == len(answers)  # fixed by the data, not by the machine's speed
    first = answers[0]
    assert first.resumable and not first.time_capped and not first.errors
    c3, city = column(first, "c3"), column(first, "city")
    assert c3.sampled and not c3.has_nan  # the NaN is in rows not read yet: unknown (a sample's n_nan says nothing)
    assert city.sampled and not city.has_nan and city.kind == "binary"  # from a sample
    assert first.facts["wide"].n_nan is None and column(first, "c5").sampled  # its block's pass goes on
    assert first.facts["fortran"].n_nan == 1  # a copy: read whole at once
    assert not HAS_TORCH or first.facts["tensor"].n_nan == 1  # a copy too
    assert all(a.resumable for a in answers[:-1])
    assert stable(answers[-1]) == stable(exact)


def test_a_nan_seen_in_the_rows_read_is_said_at_once(kernel, probe):
    kernel.connection.run_cell("wide.iloc[10, 3] = np.nan")
    try:
        first = probe.run(REQUEST, complete=False)
        c3 = column(first, "c3")
        assert first.resumable and c3.sampled and c3.has_nan  # seen, not yet counted
        assert column(resume_all(probe)[-1], "c3").n_nan == 2
    finally:
        kernel.connection.run_cell("wide.iloc[10, 3] = 0.5")


def test_an_execution_mid_pass_starts_it_over(kernel, probe):
    executed(kernel)
    assert probe.run(REQUEST, complete=False).resumable  # the first chunk of c3 is read: rows 0..CHUNK-1
    kernel.connection.run_cell("wide.iloc[5, 3] = np.nan")  # in rows already read, same objects
    try:
        last = resume_all(probe)[-1]
        assert column(last, "c3").n_nan == 2 and last.facts["wide"].n_nan == 4
    finally:
        kernel.connection.run_cell("wide.iloc[5, 3] = 0.5")


def test_a_complete_request_asks_until_done_and_changes_nothing(kernel, probe):
    executed(kernel)
    with Untouched(kernel.connection) as check:
        res = probe.run(REQUEST)  # complete=True: the follow-ups are the client's
    assert check.unchanged, check.outputs
    assert not res.resumable and column(res, "c3").n_nan == 1 and res.cached > 0

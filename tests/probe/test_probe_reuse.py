"""Facts reused while the kernel's state is unchanged (kernel/cache), on a real kernel of their own: a repeated request
scans nothing; every kind of execution invalidates (a cell another client runs, visibly or silently; an
in-place mutation; `del`; a restart; a new daemon epoch); the probe's own private requests do not; the
execution counter it installs is silent and leaves the user's callbacks, namespace, count and history alone."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.probe.collect import MODULE_NAME, ProbeClient
from crane.probe.facts import ProbeRequest

from ..sacred import kernel_state
from .conftest import own_kernel
from .no_time_cap import NO_TIME_CAP

SETUP = """
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
frame = pd.DataFrame({f"c{i}": rng.random(200_000) for i in range(8)})
frame["city"] = rng.choice(np.array(["paris", "rome", "oslo"], dtype=object), 200_000)
vec = rng.random(1_000_000)
cfg = {"lr": 0.1}
gone = 1
"""

REQUEST = ProbeRequest(
    time_budget_ms=NO_TIME_CAP,
    names=["frame", "vec", "cfg", "gone"],
    attrs=["frame.c1", "frame.nope"],
    keys=[["frame", "c2", "columns"], ["cfg", "lr", "key"]],
    modules=["numpy"],
    paths=["missing.csv"],
    columns=["c1", "c2"],
)
REUSABLE = len(REQUEST.names) + len(REQUEST.attrs) + len(REQUEST.keys)


class OtherClient:
    """Another frontend of the same kernel (VS Code, a second notebook view)."""

    def __init__(self, kernel):
        self.client = kernel.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=30)

    def execute(self, code: str, silent: bool = False, expressions: dict | None = None) -> dict:
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, user_expressions=expressions or {})
        while True:
            reply = self.client.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                assert reply["content"]["status"] == "ok", reply["content"]
                return reply["content"]

    def close(self) -> None:
        self.client.stop_channels()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    yield from own_kernel(tmp_path_factory, "reuse", SETUP)


@pytest.fixture(scope="module")
def other(kernel):
    c = OtherClient(kernel)
    yield c
    c.close()


@pytest.fixture
def probe(kernel) -> ProbeClient:
    return ProbeClient(kernel.connection)


def fresh(probe: ProbeClient, request: ProbeRequest = REQUEST):
    """Two calls in a row: the first may compute (asking again until its exact passes are complete), the second
    must reuse everything."""
    first = probe.run(request)
    second = probe.run(request)
    return first, second


def after_a_run(probe: ProbeClient, request: ProbeRequest = REQUEST):
    """The first answer after an execution (nothing may be reused: it may be partial, `resumable`) and the
    complete one (the first, or the follow-ups')."""
    first = probe.run(request, complete=False)
    return first, probe.run(request) if first.resumable else first


def test_a_repeated_request_scans_nothing_and_answers_the_same(probe):
    first, second = fresh(probe)
    assert second.cached == REUSABLE and second.scanned == 0
    assert second.facts == first.facts and second.attrs == first.attrs and second.keys == first.keys
    assert second.paths == {"missing.csv": False} and second.modules == {"numpy": True}  # always checked again
    c1 = next(c for c in second.facts["frame"].columns if c.name == "c1")
    assert c1.value_range is not None and c1.n_nan == 0  # a mentioned column: value facts, exact NaN count
    c5 = next(c for c in second.facts["frame"].columns if c.name == "c5")
    assert c5.value_range is None and c5.n_nan == 0 and c5.dtype == "float64"  # the others: name, dtype, NaN
    city = next(c for c in second.facts["frame"].columns if c.name == "city")
    assert city.numeric_parse == "none" and city.n_nan == 0


def test_the_probes_own_private_requests_do_not_invalidate(kernel, probe):
    fresh(probe)
    probe.history()
    probe.read_notebook_path()
    kernel.connection.private({"x": "1 + 1"})
    assert probe.run(REQUEST).cached == REUSABLE


@pytest.mark.parametrize("how", ["visible", "silent", "expression-only"])
def test_a_cell_run_by_another_client_invalidates(kernel, probe, other, how):
    fresh(probe)
    if how == "visible":
        other.execute("_unrelated = 1")
    elif how == "silent":
        other.execute("_unrelated = 2", silent=True)
    else:  # no code: IPython fires no event, so only the daemon's epoch (its iopub watcher saw it) tells
        other.execute("", silent=True, expressions={"v": "cfg.update(lr=0.5)"})
        assert probe.run(REQUEST).facts["cfg"].preview == {"lr": "0.1"}  # same epoch: reused (stale)
        res = probe.run(ProbeRequest(**{**_fields(REQUEST), "epoch": "other-client-seen"}), complete=False)
        assert res.cached == 0 and res.facts["cfg"].preview == {"lr": "0.5"}
        other.execute("cfg['lr'] = 0.1", silent=True)
        return
    assert probe.run(REQUEST, complete=False).cached == 0


def test_an_in_place_mutation_by_a_run_is_seen(kernel, probe, other):
    first, _ = fresh(probe)
    assert first.facts["frame"].n_nan == 0
    ident = kernel.connection.evaluate("id(frame)")
    other.execute("frame.loc[7, 'c5'] = np.nan\nvec[3] = np.nan")
    assert kernel.connection.evaluate("id(frame)") == ident
    first, res = after_a_run(probe)
    assert first.cached == 0
    c5 = next(c for c in res.facts["frame"].columns if c.name == "c5")
    assert c5.n_nan == 1 and res.facts["frame"].n_nan == 1 and res.facts["vec"].n_nan == 1
    other.execute("frame.loc[7, 'c5'] = 0.5\nvec[3] = 0.5")
    assert probe.run(REQUEST).facts["vec"].n_nan == 0


def test_del_is_seen(kernel, probe, other):
    fresh(probe)
    other.execute("del gone")
    res = probe.run(REQUEST)
    assert res.undefined == ["gone"] and "gone" not in res.facts
    other.execute("gone = 1")
    assert probe.run(REQUEST).facts["gone"].value == "1"


def test_a_new_epoch_invalidates(probe):
    req = ProbeRequest(**{**_fields(REQUEST), "epoch": "1"})
    fresh(probe, req)
    first, _ = after_a_run(probe, ProbeRequest(**{**_fields(REQUEST), "epoch": "2"}))
    assert first.cached == 0
    assert probe.run(ProbeRequest(**{**_fields(REQUEST), "epoch": "2"})).cached == REUSABLE


def test_the_execution_counter_is_silent_and_installed_once(kernel, probe, other):
    other.execute("seen = []\n_cb = lambda: seen.append(1)\nget_ipython().events.register('pre_execute', _cb)")
    fresh(probe)
    kernel.connection.private({"x": f"__import__('sys').modules.pop({MODULE_NAME!r}) and None"})  # force a reinstall
    fresh(probe)
    counters = kernel.connection.evaluate(
        "[type(getattr(c, '__self__', None)).__name__ for c in get_ipython().events.callbacks['pre_execute'] "
        f"if type(c).__module__ == {MODULE_NAME!r} or type(getattr(c, '__self__', None)).__name__ == 'count']"
    )
    assert counters == ["count"]  # the older module's counter was kept (a C counter), not a second one beside it
    before = kernel_state(kernel.connection)
    run = kernel.connection.run_cell("print(len(seen))")
    # the user's own callback ran once for this cell (not for the probe's requests); ours printed nothing
    assert run.status == "ok" and run.stdout == "1\n" and not run.stderr
    after = kernel_state(kernel.connection)
    assert after["count"] == before["count"] + 1 and after["In"][-1] == "print(len(seen))"
    other.execute("get_ipython().events.unregister('pre_execute', _cb)\ndel _cb, seen")


def test_a_restart_starts_afresh(tmp_path):
    k = start_kernel(tmp_path)
    try:
        k.connection.run_cell("x = 1")
        probe = ProbeClient(k.connection)
        req = ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["x"])
        probe.run(req)
        assert probe.run(req).cached == 1
        installs = probe.installs
        k.manager.restart_kernel(now=True)
        k.connection.wait_ready(30)
        k.connection.run_cell("x = 'after'")
        res = probe.run(req)
        assert probe.installs == installs + 1 and res.cached == 0 and res.facts["x"].value == "'after'"
    finally:
        k.shutdown()


def _fields(req: ProbeRequest) -> dict:
    return {f: getattr(req, f) for f in req.__struct_fields__}

"""The probe leaves the user's kernel as it was: namespace (keys and object ids), execution count, In/Out, and
what another client sees on iopub. It runs no user code, stays within its size caps, and reinstalls itself."""

from __future__ import annotations

import msgspec
import pytest

from crane.probe.collect import MODULE_NAME, ProbeClient, probe_version
from crane.probe.facts import ProbeRequest

from ..library_versions import HAS_TORCH
from .conftest import torch_only
from .no_time_cap import NO_TIME_CAP

STATE = (
    "(sorted((k, id(v)) for k, v in get_ipython().user_ns.items()), get_ipython().execution_count,"
    " len(get_ipython().history_manager.input_hist_raw), sorted(Out), id(_), id(__), id(___),"
    " sorted((e, [id(c) for c in cs if type(c).__module__ != '_crane_probe' and not (type(c).__name__ =="
    " 'method-wrapper' and type(c.__self__).__name__ == 'count')])"
    " for e, cs in get_ipython().events.callbacks.items()))"
)

EVERYTHING = ProbeRequest(
    time_budget_ms=NO_TIME_CAP,
    names=[
        "df", "df_idx", "s", "X", "y", "big_vec", "clf", "rf", "pipe", "iris", "cfg",
        "counts", "lst", "tup", "helper", "Thing", "thing", "np", "plt", "nope", "trap", "trap_ga", "trap_dict",
        "trap_list", "trap_obj_arr", "trap_df", "TrapClass",
        *torch_only("t", "net", "mlp", "loader", "trap_loader", "trap_model"),
    ],
    attrs=["clf.coef_", "plt.scatter", "df.age", "np.float", "thing.method", "nope.x", *torch_only("mlp.fc1")],
    keys=[["df", "age", "columns"], ["cfg", "lr", "key"], ["lst", 9, "key"]],
    modules=["numpy", "no_such_module_xyz", "wsgiref.simple_server"],
    paths=["data/train.csv", "nope.csv"],
)  # fmt: skip


def test_probing_changes_nothing_the_user_or_another_client_can_see(probe, watcher):
    watcher.evaluate(f"__import__('sys').modules.pop({MODULE_NAME!r}, None) and None")  # force a fresh install
    watcher.drain()
    before = watcher.evaluate(STATE)
    installs = probe.installs
    for i in range(3):
        res = probe.run(EVERYTHING, complete=i > 0)  # the first answer alone (it may be partial: `resumable`)
        assert res.facts["df"].shape == [6, 6]
        assert (res.cached > 0) == (i > 0)  # with the reuse of facts on: nothing ran, so calls 2 and 3 reuse
    probe.history()
    probe.read_notebook_path()
    assert probe.installs == installs + 1
    msgs = watcher.drain()
    assert msgs, "the watcher should at least see busy/idle status messages"
    assert {m["msg_type"] for m in msgs} == {"status"}, [m for m in msgs if m["msg_type"] != "status"]
    assert watcher.evaluate(STATE) == before
    assert watcher.evaluate(f"{MODULE_NAME!r} in get_ipython().user_ns") == "False"
    assert watcher.evaluate(f"{MODULE_NAME!r} in __import__('sys').modules") == "True"


def test_no_user_code_runs(probe, watcher):
    res = probe.run(
        ProbeRequest(
            time_budget_ms=NO_TIME_CAP,
            names=["trap", "trap_ga", "trap_dict", "trap_list", "trap_obj_arr", "trap_df", "TrapClass",
                   *torch_only("trap_loader", "trap_model")],  # fmt: skip
            attrs=["trap.prop", "trap.missing", "trap_ga.x", "trap_dict.a", "TrapClass.zz", "trap_list.append",
                   *torch_only("trap_model.lin", "trap_model.nope")],  # fmt: skip
            keys=[["trap_dict", "a", "key"], ["trap", "a", "key"], ["trap_list", 1, "key"]],
        )
    )
    assert watcher.evaluate("trap_calls") == "[]"
    f = res.facts
    assert f["trap"].type == "__main__.Trap" and f["trap"].kind == "other"
    assert f["trap_list"].value == "[<__main__.Trap>, <__main__.Trap>]"
    assert f["trap_dict"].keys == ["a"] and f["trap_dict"].length == 1
    assert f["trap_obj_arr"].num_unique is None and f["trap_obj_arr"].n_nan == 0
    assert f["trap_df"].columns[0].n_nan == 0
    if HAS_TORCH:
        assert f["trap_loader"].dataloader.batch_size == 2 and f["trap_loader"].dataloader.num_examples is None
        assert f["trap_model"].torch_module.layers[0].type == "Linear"
    a = {c.expr: c.present for c in res.attrs}
    assert a == {
        "trap.prop": True, "trap.missing": None, "trap_ga.x": None, "trap_dict.a": False, "TrapClass.zz": None,
        "trap_list.append": True, **({"trap_model.lin": True, "trap_model.nope": False} if HAS_TORCH else {}),
    }  # fmt: skip
    k = {c.expr: c.present for c in res.keys}
    assert k == {"trap_dict": None, "trap": None, "trap_list": True}


def test_no_user_code_runs_on_the_fast_paths_of_a_large_frame(kernel, probe, watcher):
    """A frame past the small-frame size: unmentioned object columns go through is_string_array, NaN checks,
    a sample's uniques (after the type check); mentioned ones through the value facts; blocks in one pass."""
    run = kernel.connection.run_cell(
        "trap_big = pd.DataFrame({'o': np.array([Trap() for _ in range(30000)] + ['x'] * 30000, dtype=object),"
        " 'p': np.array([Trap() for _ in range(60000)], dtype=object), 'f': np.zeros(60000)})\n"
        "trap_calls.clear()"
    )
    assert run.status == "ok", run.evalue
    try:
        res = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["trap_big"], attrs=["trap_big.p"], columns=["p"]))
        assert watcher.evaluate("trap_calls") == "[]"
        cols = {c.name: c for c in res.facts["trap_big"].columns}
        assert cols["o"].n_nan == 0 and cols["p"].n_nan == 0 and cols["f"].n_nan == 0
        assert cols["o"].num_unique is None and cols["p"].num_unique is None  # never hashed
    finally:
        kernel.connection.run_cell("del trap_big")


def test_total_and_per_variable_caps(probe, watcher):
    names = watcher.evaluate("sorted(k for k in get_ipython().user_ns if not k.startswith('_'))")
    req = ProbeRequest(time_budget_ms=NO_TIME_CAP, names=eval(names))  # every user name at once
    res = probe.run(req)
    assert res.payload_bytes <= 32 * 1024 + 512
    for f in res.facts.values():
        assert len(msgspec.json.encode(f)) <= 4096 + 64, f.name
    small = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=eval(names), max_total_bytes=3000, max_var_bytes=1000))
    assert small.truncated and small.payload_bytes <= 3000 + 512
    assert 0 < len(small.facts) < len(res.facts)


def test_large_array_is_sampled_not_scanned(kernel, probe):
    run = kernel.connection.run_cell("huge = np.zeros(12_000_000); huge[::7] = np.nan")
    assert run.status == "ok"
    try:
        f = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["huge"])).facts["huge"]
        assert f.sampled and f.n_nan is None and f.has_nan is True and f.shape == [12_000_000]
    finally:
        kernel.connection.run_cell("del huge")


def test_reinstalls_after_restart_or_version_change(probe, watcher):
    watcher.evaluate(f"__import__('sys').modules.pop({MODULE_NAME!r}, None) and None")
    n = probe.installs
    assert probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["n_int"])).facts["n_int"].value == "42"
    assert probe.installs == n + 1
    watcher.evaluate(f"setattr(__import__('sys').modules[{MODULE_NAME!r}], 'VERSION', 'old')")
    assert probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["n_int"])).facts["n_int"].value == "42"
    assert probe.installs == n + 2
    assert watcher.evaluate(f"__import__('sys').modules[{MODULE_NAME!r}].VERSION") == repr(probe_version())


@pytest.mark.parametrize("run_body", ["lambda s: 1/0", "lambda s: 'not json'"])
def test_a_probe_function_the_notebook_rebound_is_never_called(kernel, watcher, run_body):
    # (CRANE calls only the module its own install made, binding what that install left: kernel/private_module's
    # seal. Before it, a `run` rebound there was called, and its error or malformed answer came back)
    client = ProbeClient(kernel.connection)
    client.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["n_int"]))
    broken = f"exec(\"import sys\\nsys.modules[{MODULE_NAME!r}].run = eval(B)\", {{'B': {run_body!r}}})"
    watcher.evaluate(broken)
    try:
        assert client.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["n_int"])).facts["n_int"].value == "42"
    finally:
        watcher.evaluate(f"__import__('sys').modules.pop({MODULE_NAME!r}, None) and None")


def test_history_and_notebook_path(kernel, probe, watcher):
    hist = probe.history()
    assert hist and hist[0][0] == 1 and "import numpy as np" in hist[0][1]
    assert [n for n, _ in hist] == sorted(n for n, _ in hist)
    assert probe.history(limit=1)[-1] == hist[-1] and len(probe.history(limit=1)) == 1
    assert probe.read_notebook_path() is None
    kernel.connection.run_cell("__vsc_ipynb_file__ = '/home/u/nb.ipynb'")
    try:
        assert probe.read_notebook_path() == "/home/u/nb.ipynb"
    finally:
        kernel.connection.run_cell("del __vsc_ipynb_file__")


def test_estimator_constructions_are_validated_without_running_user_code(probe, watcher):
    """ProbeRequest.constructions: scikit-learn's own classes are built and validated privately; a user subclass
    (its __init__ is user code) and non-sklearn callables are never called; the kernel is unchanged."""
    watcher.evaluate(
        "get_ipython().run_cell('class MyForest(RandomForestClassifier):\\n"
        "    def __init__(self, max_depth=None):\\n        trap_calls.append(\"MyForest\")\\n"
        "        super().__init__(max_depth=max_depth)\\n') and None")
    assert watcher.evaluate("'MyForest' in get_ipython().user_ns") == "True"
    before = watcher.evaluate(STATE)
    res = probe.run(ProbeRequest(time_budget_ms=NO_TIME_CAP, constructions=[
        ["a", "RandomForestClassifier", {"max_depth": "-1"}],
        ["b", "sklearn.linear_model.LogisticRegression", {"C": "-1.0"}],
        ["c", "MyForest", {"max_depth": "-1"}],
        ["d", "Trap", {"x": "1"}],
        ["e", "RandomForestClassifier", {"max_depth": "3"}],
        ["f", "RandomForestClassifier", {"no_such_param": "1"}],
    ]))
    assert set(res.param_errors) == {"a", "b"}, res.param_errors
    assert res.param_errors["a"].startswith("The 'max_depth' parameter of RandomForestClassifier must be")
    assert watcher.evaluate("trap_calls") == "[]"
    assert watcher.evaluate(STATE) == before

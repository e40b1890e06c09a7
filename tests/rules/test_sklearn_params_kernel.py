"""sklearn-params for estimators the cell builds with literal keywords, validated by the KERNEL's scikit-learn (a
private probe request, ProbeRequest.constructions), not the daemon's: `max_features='auto'` is accepted by 1.2
(deprecated) and rejected by 1.9. Every prediction is checked against the cell's real run in both environments."""

from __future__ import annotations

import pytest

from crane.analysis.cell import analyze_cell, plan_probe
from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import predict_source, run_target

SETUP = """
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn import ensemble
df = pd.DataFrame({'x': [1.0, 2.0, 3.0, 4.0], 'y': [0, 1, 0, 1]})
"""


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("params"), python=kernel_python(request.param))
    yield k
    k.shutdown()


@pytest.mark.parametrize(
    "target",
    [
        "rf = RandomForestClassifier(max_features='auto')\nrf.fit(df[['x']], df['y'])",
        "rf = ensemble.RandomForestClassifier(n_estimators=5, max_features='auto')\nrf.fit(df[['x']], df['y'])",
        "from sklearn.tree import DecisionTreeClassifier\ndt = DecisionTreeClassifier(criterion='mse')\n"
        "dt.fit(df[['x']], df['y'])",
        "rf = RandomForestClassifier(max_depth=-1)\nrf.fit(df[['x']], df['y'])",
        # clean look-alikes
        "rf = RandomForestClassifier(max_features='sqrt')\nrf.fit(df[['x']], df['y'])",
        "rf = ensemble.RandomForestClassifier(n_estimators=5, max_depth=3)\nrf.fit(df[['x']], df['y'])",
    ],
)
def test_validated_by_the_kernels_version(kernel, target):
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    if run.status == "ok":
        assert findings == [], findings
        return
    assert run.ename == "InvalidParameterError", (run.ename, run.evalue)
    assert [(f.rule, f.ename) for f in findings][:1] == [("sklearn-params", "InvalidParameterError")], findings
    assert findings[0].message == run.evalue.split("\n")[0]


def test_auto_is_what_differs(kernel):
    """The same cell: accepted by scikit-learn 1.2, rejected by 1.9 (so the version that decides is the kernel's)."""
    target = "rf = RandomForestClassifier(max_features='auto')\nrf.fit(df[['x']], df['y'])"
    predict_source(kernel, SETUP, target)
    version = kernel.connection.evaluate("__import__('sklearn').__version__", timeout=30)
    run = run_target(kernel, target)
    assert (run.status == "error") == (not version.strip("'").startswith("1.2")), version


def test_plan_sends_literal_constructions_only():
    plan = plan_probe(analyze_cell(
        "from sklearn.svm import SVC\nm = SVC(C=-1, kernel='rbf')\nn = SVC(C=c)\np = SVC(1.0)\nq = make(a=1)"))
    assert plan.constructions == [["SVC(C=-1, kernel='rbf')", "sklearn.svm.SVC", {"C": "-1", "kernel": "'rbf'"}]]


def test_cross_parameter_message_follows_the_kernels_version(kernel):
    """fit()'s own solver/penalty check: 'none' in scikit-learn 1.2's message, None from 1.4 on."""
    target = ("from sklearn.linear_model import LogisticRegression\nlr = LogisticRegression(penalty='l1')\n"
              "lr.fit(df[['x']], df['y'])")
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    assert run.ename == "ValueError"
    assert [(f.rule, f.ename, f.message) for f in findings][:1] == [("sklearn-params", "ValueError", run.evalue)]

"""CRANE end to end on a kernel of each supported Python (3.11, 3.12, 3.13: build/kernel-py3XX, `make
kernel-pythons`; a version this machine has no interpreter of is skipped and says so), one kernel per version:
probe facts, the fork sandbox, the copy (transplant) and portable paths (the call guard on `sys.monitoring`
from 3.12), a checkpointed session, and the predictions whose wording changed between versions, each against
what the real kernel raises; every run is watched by `crane.kernel.untouched` and leaves the kernel unchanged."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest
from crane.sandbox import speculate
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session
from crane.sandbox.transplant import transplant

from ..kernel_envs import PYTHON_KERNELS, python_kernel
from ..rules.conftest import predict_source, run_target

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX kernels")

SETUP = """
import sys
import numpy as np, pandas as pd
df = pd.DataFrame({'price': [1.0, 2.0, None], 'city': ['a', 'b', 'c']})
X = np.arange(12.0).reshape(3, 4)
class Model:
    def __init__(self, fit_intercept=True, *, copy_X=True, n_jobs=None):
        self.fit_intercept = fit_intercept
    def fit(self, X, y, sample_weight=None):
        return self
model = Model()
"""


@pytest.fixture(scope="module", params=PYTHON_KERNELS, ids=[f"py{v}" for v in PYTHON_KERNELS])
def pyk(request, tmp_path_factory):
    version = request.param
    kernel = start_kernel(tmp_path_factory.mktemp(f"py{version}"), python=python_kernel(version))
    try:
        conn = kernel.connection
        assert conn.evaluate("'%d.%d' % __import__('sys').version_info[:2]") == version
        run = conn.run_cell(SETUP, timeout=120)
        assert run.status == "ok", (run.ename, run.evalue)
        yield {"kernel": kernel, "conn": conn, "version": tuple(int(p) for p in version.split("."))}
    finally:
        kernel.shutdown()


def _untouched(conn, what, *args, **kw):
    with Untouched(conn) as watch:
        out = what(conn, *args, **kw)
    assert watch.unchanged, (watch.outputs, watch.changes(), out)
    assert conn.evaluate("1 + 1") == 2
    return out


def test_probe_facts_name_the_kernels_python(pyk):
    result = _untouched(pyk["conn"], lambda conn: ProbeClient(conn).run(
        ProbeRequest(names=["df", "X", "model"], time_budget_ms=60_000)))
    assert result.libraries["python"].startswith("%d.%d." % pyk["version"]), result.libraries
    assert {"numpy", "pandas"} <= set(result.libraries), result.libraries
    df = result.facts["df"]
    assert df.shape == [3, 2] and [c.name for c in df.columns or []] == ["price", "city"], df
    assert result.facts["X"].shape == [3, 4]


def test_the_fork_sandbox_runs_the_cell_like_the_kernel(pyk):
    conn = pyk["conn"]
    v = _untouched(conn, speculate, "y = X.sum()\nX @ np.ones(3)", 60.0, sandbox=SandboxOptions(confinement="os"))
    assert v.mode in ("layered", "blocking") and v.verdict == "crash", v
    real = conn.run_cell("X @ np.ones(3)")
    assert (v.ename, v.line) == (real.ename, 2) == ("ValueError", 2), (v, real.ename)
    v = _untouched(conn, speculate, "df['double'] = df.price * 2\nprint(df.double.sum())", 60.0,
                   sandbox=SandboxOptions(confinement="os"))
    assert v.verdict == "no-crash" and v.stdout.strip() == "6.0", v


def test_the_copy_path_runs_the_cell_in_a_worker_of_the_kernels_python(pyk):
    conn = pyk["conn"]
    bad = _untouched(conn, transplant, "print(sys.version_info[:2])\ndf['missing']", 60.0)
    assert bad.mode == "transplant" and bad.verdict == "crash" and (bad.ename, bad.line) == ("KeyError", 2), bad
    assert bad.stdout.strip() == str(pyk["version"]), bad.stdout  # the worker is the kernel's interpreter
    good = _untouched(conn, transplant, "Model(fit_intercept=False).fit(X, X[:, 0]).fit_intercept", 60.0)
    assert good.verdict == "no-crash" and good.displays[-1].text == "False", good


def test_a_path_in_the_kernels_state_is_copied(pyk):
    """Python 3.13's `pathlib.PurePath` has a `_raw_path` property over its base's slot of that name; pickle never
    reads it (PurePath's own `__reduce__` returns the class and its parts), but the export's proof refused every
    `Path` in a 3.13 kernel's state ("shadows a slot pickle reads"): every copy verdict `unavailable`."""
    conn = pyk["conn"]
    assert conn.run_cell("from pathlib import Path\nP = Path('data') / 'x.csv'", timeout=60).status == "ok"
    v = _untouched(conn, transplant, "print(P.name)\nP.missing", 60.0)
    assert (v.mode, v.verdict, v.ename) == ("transplant", "crash", "AttributeError"), v
    assert v.stdout.strip() == "x.csv", v


def test_the_portable_sandbox_guards_with_sys_monitoring_from_3_12(pyk):
    conn = pyk["conn"]
    portable = SandboxOptions(confinement="portable")
    v = _untouched(conn, speculate, "x = df.price.mean()\ny = df['nope']", 60.0, sandbox=portable)
    assert v.mode == "portable" and v.verdict == "crash" and (v.ename, v.line) == ("KeyError", 2), v
    # The guard's mechanism: sys.monitoring on 3.12+ (no profile hook set, its tool cannot be turned off); before
    # 3.12 the profile hook, or, where Landlock holds the worker, no per-call hook at all (the lean guard:
    # worker/guard.py); neither can be removed by the cell.
    v = _untouched(conn, speculate, "print(sys.getprofile() is None)", 60.0, sandbox=portable)
    lean = "landlock" in ((v.transplant.layers if v.transplant else None) or [])
    assert v.verdict == "no-crash" and v.stdout.strip() == str(pyk["version"] >= (3, 12) or lean), v
    if pyk["version"] >= (3, 12):
        v = _untouched(conn, speculate, "sys.monitoring.set_events(4, 0)", 60.0, sandbox=portable)
        if lean:  # no monitoring tool of CRANE's: the call fails as it does in the kernel (tool 4 not in use)
            assert v.verdict == "crash" and v.ename == "ValueError", v
        else:
            assert v.verdict == "blocked" and "sys.monitoring.set_events is refused" in (v.reason or ""), v
    v = _untouched(conn, speculate, "sys.setprofile(None)", 60.0, sandbox=portable)
    assert v.verdict == "blocked" and ("sys.setprofile is refused" in (v.reason or "")
                                       or "changing the interpreter's profile hook is refused" in (v.reason or "")), v
    v = _untouched(conn, speculate, "open('/tmp/crane-portable-probe.txt', 'w').write('x')", 60.0, sandbox=portable)
    assert v.verdict == "blocked", v


def test_a_session_checkpoints_and_rolls_back(pyk):
    conn = pyk["conn"]

    def session(conn):
        with open_session(conn, budget_s=30, sandbox=SandboxOptions(confinement="os")) as sb:
            assert isinstance(sb, SandboxSession), type(sb)
            v = sb.run("X = X[:, :2]")
            assert v.verdict == "no-crash", v
            assert sb.checkpoint() == 1
            v = sb.run("X = X * 0 + 7\nX @ np.ones(4)")
            assert v.verdict == "crash" and (v.ename, v.line) == ("ValueError", 2), v
            assert sb.inspect("float(X.max())") == "7.0"  # the session's own state persists
            sb.rollback()
            assert sb.inspect("(X.shape, float(X.max()))") == "((3, 2), 9.0)"  # back at the checkpoint
        return True

    assert _untouched(conn, session)
    assert conn.evaluate("list(X.shape)") == [3, 4]


# -- predictions whose wording follows the kernel's Python -------------------------------------------------------
@pytest.mark.parametrize("target", [
    "Model(fit_intercep=False)",  # 3.13: ". Did you mean 'fit_intercept'?"
    "model.fit(X, X[:, 0], sample_weigth=None)",
    "model.fit(X, X[:, 0], x=1)",  # a case-only difference: 'X'
    "Model(slef=1)",  # too far from every parameter: no suggestion on any version
])
def test_an_unexpected_keyword_is_predicted_as_the_kernel_words_it(pyk, target):
    findings = predict_source(pyk["kernel"], SETUP, target)
    assert findings and findings[0].rule == "call-signature", findings
    real = run_target(pyk["kernel"], target)
    assert (findings[0].ename, findings[0].message) == (real.ename, real.evalue), findings[0]


@pytest.mark.parametrize("target", [
    "x = model.fit(X,\n",  # ends inside a bracket
    "rows = [1, 2\n",
    "def f():\n",  # a block with no body
    'text = """abc\n',  # an open triple-quoted string
    "x = (1,\nprint(x)",  # unclosed, but more code follows: a plain SyntaxError everywhere
    "x = 1 +\n",
])
def test_a_syntax_error_is_predicted_as_the_kernel_raises_it(pyk, target):
    findings = predict_source(pyk["kernel"], SETUP, target)
    assert findings and findings[0].rule == "syntax-error", findings
    real = run_target(pyk["kernel"], target)
    assert findings[0].ename == real.ename, (findings[0], real.ename, real.evalue)
    assert real.evalue.startswith(findings[0].message.split(": ", 1)[1] + " ("), (findings[0].message, real.evalue)
    if pyk["version"] >= (3, 13) and target.endswith("\n") and "+" not in target:
        assert real.ename == "_IncompleteInputError"  # what the rule learnt

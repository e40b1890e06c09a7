"""`crane check | diagnose | bench --server URL`: kernels started on a real Jupyter Server through its sessions
API (session path = the notebook's path relative to the current folder), the same verdicts as a local kernel,
clear errors with exit code 2 (wrong token, unreachable server, a server that goes away mid-run), and no kernel
left on the server, also after Ctrl-C or SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..cli.conftest import make_notebook
from ..jupyter_server_proc import JupyterServerProcess, free_port

REPO = Path(__file__).resolve().parents[2]
JUNOBENCH = REPO.parent / "shared" / "bench" / "junobench-lite"
# Two libraries, two exceptions (ValueError, AttributeError), each case a crash and a fix: every variant of
# junobench-lite takes the same path here (the rules undecided, a blocking sandbox run decides), so a third
# case (sklearn_9 was one: ValueError again, 1/3 of the test's CPU) adds no path; sklearn_9 runs locally in
# tests/cli/test_check_examples.py.
CASES = ("pandas_3", "numpy_2")


def crane(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    full.pop("JUPYTER_TOKEN", None) if env is None or "JUPYTER_TOKEN" not in env else None
    return subprocess.run([sys.executable, "-m", "crane", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=full)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def notebook(served) -> Path:
    return make_notebook(served / "project" / "analysis.ipynb", [
        ("import csv\nrows = list(csv.DictReader(open('data.csv')))\nconfig = {'lr': 0.1}", 1),
        ("print(rows[0]['a'])", 2),
        ("value = config['momentum'] * 2", None),
        ("total = sum(int(r['b']) for r in rows)", None),
    ])


def _findings(report: dict) -> list[tuple]:
    return [(c["cell"], c["prediction"], [(f["ename"], f["rule"], f["line"]) for f in c.get("findings", [])],
             (c.get("sandbox") or {}).get("verdict")) for c in _cells(report)]


def _cells(report: dict) -> list[dict]:
    (nb,) = report["notebooks"]  # crane.check/3: one entry per notebook
    return nb["cells"]


def test_check_on_the_server_matches_a_local_kernel(jserver, served, notebook):
    rel = "project/analysis.ipynb"
    local = crane("check", rel, "--json", "--mode", "auto", cwd=served)
    remote = crane("check", rel, "--json", "--mode", "auto", "--server", jserver.url, cwd=served,
                   env={"JUPYTER_TOKEN": jserver.token})
    assert (local.returncode, remote.returncode) == (1, 1), (local.stderr, remote.stderr)
    lrep, rrep = json.loads(local.stdout), json.loads(remote.stdout)
    assert _findings(rrep) == _findings(lrep)
    assert [c["sandbox"]["verdict"] for c in _cells(rrep)] == ["crash", "no-crash"]  # the fork sandbox ran on the server kernel
    assert _cells(rrep)[0]["findings"][0]["ename"] == "KeyError"
    assert jserver.kernel_ids() == []


def test_diagnose_on_the_server(jserver, served, notebook):
    res = crane("diagnose", "project/analysis.ipynb", "--cell", "3", "--server", jserver.url, "--token",
                jserver.token, cwd=served)
    assert res.returncode == 1, res.stderr
    assert "KeyError" in res.stdout and "momentum" in res.stdout
    assert jserver.kernel_ids() == []


@pytest.mark.skipif(not JUNOBENCH.is_dir(), reason="../shared/bench/junobench-lite is not beside the checkout")
def test_auto_mode_verdicts_on_junobench_lite_cases_match_local(jserver, served):
    """Auto mode on the server decides every variant as the local kernel does: tests/bench pins the local auto
    mode at accuracy 1.0 with every variant decided by the sandbox (crash / no-crash, the expected exception),
    so the server's run must give exactly the cases' labels, decided the same way."""
    bench = served / "bench"
    for case in CASES:
        shutil.copytree(JUNOBENCH / case, bench / case, dirs_exist_ok=True)
    res = crane("bench", *[f"bench/{c}" for c in CASES], "--mode", "auto", "--jobs", "2", "--json", "--quiet",
                "--server", jserver.url, "--token", jserver.token, cwd=served, timeout=1200)
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    got = sorted((r["case"], r["variant"], r["predictedCrash"], r.get("predictedEname"), r.get("verdict"), r.get("error"))
                 for r in rep["results"])
    want = []
    for case in CASES:
        spec = json.loads((JUNOBENCH / case / "case.json").read_text())
        for name, v in spec["variants"].items():
            crash = v["expect"]["crash"]
            want.append((case, name, crash, v["expect"].get("ename") if crash else None,
                         "crash" if crash else "no-crash", None))
    assert got == sorted(want)
    assert rep["overall"]["accuracy"] == 1.0 and rep["verdicts"] == {"crash": len(CASES), "no-crash": len(CASES)}
    assert jserver.kernel_ids() == []


def test_wrong_token_and_unreachable_server_exit_2(jserver, served, notebook):
    res = crane("check", "project/analysis.ipynb", "--server", jserver.url, "--token", "wrong", cwd=served)
    assert res.returncode == 2 and "refused" in res.stderr and "check the token" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "wrong" not in res.stderr  # the token is not echoed
    res = crane("check", "project/analysis.ipynb", "--server", jserver.url, cwd=served)  # no token at all
    assert res.returncode == 2 and "no token was given" in res.stderr, res.stderr
    res = crane("check", "project/analysis.ipynb", "--server", f"http://127.0.0.1:{free_port()}/", "--token", "t",
                cwd=served)
    assert res.returncode == 2 and "cannot reach the Jupyter server" in res.stderr, res.stderr
    res = crane("check", "project/analysis.ipynb", "--server", "127.0.0.1:8888", cwd=served)
    assert res.returncode == 2 and "not a URL" in res.stderr
    res = crane("check", str(notebook), "--server", jserver.url, "--token", jserver.token, cwd=served.parent)
    assert res.returncode == 2 and "run crane from the folder the Jupyter server serves" in res.stderr
    res = crane("check", "project/analysis.ipynb", "--server", jserver.url, "--python", sys.executable, cwd=served)
    assert res.returncode == 2 and "--python cannot be used with --server" in res.stderr
    assert jserver.kernel_ids() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_no_kernel_on_the_server(jserver, served, sig):
    make_notebook(served / "project" / "slow.ipynb", [("import time\ntime.sleep(120)", 1), ("x = 1", None)])
    # PYTHONFAULTHANDLER: a SIGABRT makes the CLI print every thread's stack (what it waited on, if it hangs)
    env = {**os.environ, "JUPYTER_TOKEN": jserver.token, "PYTHONFAULTHANDLER": "1"}
    # SIGINT as a terminal delivers it: whatever the test runner's own disposition is (a background job ignores
    # it, and a Python started with SIGINT ignored never raises KeyboardInterrupt)
    proc = subprocess.Popen([sys.executable, "-m", "crane", "check", "project/slow.ipynb", "--server", jserver.url],
                            cwd=served, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # the kernel is on the server and working for the CLI (starting up, or the replay of the slow cell)
        _wait_for(lambda: any(k.execution_state == "busy" for k in jserver.kernels()) or proc.poll() is not None,
                  60, "the kernel on the server to be busy")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"crane check still ran 60 s after {sig.name}; its threads:\n{err[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert jserver.kernel_ids() == []


def test_server_gone_mid_run_exits_2_with_a_clear_error(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    make_notebook(root / "nb.ipynb", [("import time\ntime.sleep(60)", 1), ("x = 1", None)])
    srv = JupyterServerProcess(root)
    try:
        env = {**os.environ, "JUPYTER_TOKEN": srv.token, "CRANE_JUPYTER_RECONNECT_S": "3"}
        proc = subprocess.Popen([sys.executable, "-m", "crane", "check", "nb.ipynb", "--server", srv.url],
                                cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for(lambda: srv.kernel_ids() or proc.poll() is not None, 60, "the kernel on the server")
            srv.stop()
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 2, err
        assert "kernel error" in err and "Jupyter server" in err and "Traceback" not in err, err
    finally:
        srv.stop()

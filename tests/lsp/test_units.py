"""Unit tests of the server's pure parts: settings, URIs, discovery dirs and candidates, facts cache,
findings → diagnostics, and `crane serve --tcp`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from crane.finding import Finding, Related
from crane.lsp.discovery import candidates, runtime_dirs
from crane.lsp.facts_cache import FS_REUSE_S, FactsCache
from crane.lsp.hover import chain_at
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot, notebook_path
from crane.lsp.settings import parse_settings
from crane.probe.facts import Facts, ProbeRequest, ProbeResult

from .conftest import REPO


def test_settings_fall_back_key_by_key():
    s, problems = parse_settings(
        {"crane": {"mode": "llm", "speculative": {"enabled": False, "budgetSeconds": "soon"},
                   "llm": {"model": "openai/m", "apiBase": "ftp://x", "maxTokens": -1, "timeout": 5},
                   "agent": {"maxSteps": 3, "budgetUsd": -1, "stepMode": True, "bogus": 1},
                   "kernel": {"connectionFile": None}, "hover": "yes", "logLevel": "loud", "other": {}}}
    )
    assert s.mode == "llm"
    assert s.speculative.enabled is False and s.speculative.budget_seconds == 10.0  # only the bad key falls back
    assert s.llm.model == "openai/m" and s.llm.api_base is None and s.llm.timeout_s == 5 and s.llm.max_tokens is None
    assert s.agent.max_steps == 3 and s.agent.budget_usd is None and s.agent.step_mode is True
    assert s.kernel.connection_file is None and s.hover is True and s.log_level == "info"
    keys = [p.split(":")[0] for p in problems]
    assert keys == ["crane.hover", "crane.logLevel", "crane.speculative.budgetSeconds", "crane.llm.apiBase",
                    "crane.llm.maxTokens", "crane.agent.budgetUsd"]
    assert not any("bogus" in p or "other" in p for p in problems)  # unknown keys are ignored
    assert s.llm_settings().model == "openai/m" and s.llm_settings().timeout_s == 5
    assert parse_settings(None) == (type(s)(), [])
    assert parse_settings(None)[0].mode == "auto" and parse_settings(None)[0].speculative_on
    assert parse_settings({"mode": "static"})[0].mode == "static"  # the bare section
    assert parse_settings({"crane": {"logLevel": "warn"}})[0].log_level == "warn"
    assert parse_settings({"crane": {"speculative": 3}})[1] == ["crane.speculative: expected an object, got 3; using its defaults"]
    assert parse_settings([1, 2])[1]


def test_tuning_from_env():
    from crane.lsp.settings import Tuning

    t = Tuning.from_env({"CRANE_LSP_DEBOUNCE_MS": "40", "CRANE_LSP_PROBE_TIMEOUT_MS": "x"})
    assert t.debounce_ms == 40 and t.probe_timeout_ms == 1000


def test_notebook_paths_from_uris():
    assert notebook_path("file:///tmp/a%20b/x.ipynb") == "/tmp/a b/x.ipynb"
    assert notebook_path("vscode-notebook-cell:/tmp/x.ipynb#W0sZmlsZQ%3D%3D") == "/tmp/x.ipynb"
    assert notebook_path("untitled:Untitled-1.ipynb") is None
    assert notebook_path("vscode-remote://ssh-remote+h/x.ipynb") is None


def test_runtime_dirs_and_candidates(tmp_path):
    a, b = tmp_path / "a", tmp_path / "xdg" / "jupyter" / "runtime"
    a.mkdir()
    b.mkdir(parents=True)
    dirs = runtime_dirs({"JUPYTER_RUNTIME_DIR": str(a), "XDG_RUNTIME_DIR": str(tmp_path / "xdg")})
    assert dirs[:2] == [str(a), str(b)]
    old = a / "kernel-1.json"
    new = b / "kernel-v3abc.json"
    old.write_text("{}")
    new.write_text("{}")
    (a / "other.json").write_text("{}")
    os.utime(old, (time.time() - 100, time.time() - 100))
    assert candidates([str(a), str(b)]) == [str(new), str(old)]


def test_facts_cache_answers_only_what_it_knows():
    cache = FactsCache()
    req = ProbeRequest(names=["df", "gone"], modules=["pandas"], paths=["x.csv"])
    cache.store(req, ProbeResult(facts={"df": Facts(name="df", type="DataFrame")}, undefined=["gone"], modules={"pandas": True}, paths={"x.csv": False}))
    got = cache.lookup(ProbeRequest(names=["df", "gone", "never_seen"], paths=["x.csv"]))
    assert got is not None
    assert set(got.facts) == {"df"} and got.undefined == ["gone"] and got.paths == {"x.csv": False}
    assert "never_seen" not in got.undefined  # unknown is not undefined
    assert cache.lookup(ProbeRequest(names=["never_seen"])) is None
    cache.store(ProbeRequest(names=["gone"]), ProbeResult(facts={"gone": Facts(name="gone", type="int")}))
    gone = cache.lookup(ProbeRequest(names=["gone"]))
    assert gone is not None and gone.undefined == []


def test_facts_cache_reuses_a_live_answer_only_for_the_same_request_and_kernel_state():
    now = [0.0]
    cache = FactsCache(clock=lambda: now[0])
    req = ProbeRequest(names=["df"], columns=["a"])
    res = ProbeResult(facts={"df": Facts(name="df", type="DataFrame")})
    cache.remember(req, ("s", 1, 0), res)
    assert cache.reuse(req, ("s", 1, 0)) == res and cache.reuse(req, ("s", 1, 0)) is not res  # a copy
    assert cache.reuse(ProbeRequest(names=["df"], columns=["a"], epoch="x"), ("s", 1, 0)) == res  # epoch aside
    assert cache.reuse(ProbeRequest(names=["df"], columns=["b"]), ("s", 1, 0)) is None  # another request
    for other in (("s", 2, 0), ("s", 1, 1), ("t", 1, 0)):  # activity seen, a reported run, another attachment
        assert cache.reuse(req, other) is None
    now[0] = 1000.0
    assert cache.reuse(req, ("s", 1, 0)) == res  # nothing ran: facts about values do not age
    files = ProbeRequest(names=["df"], paths=["x.csv"])
    cache.remember(files, ("s", 1, 0), res)
    now[0] += FS_REUSE_S + 0.1
    assert cache.reuse(files, ("s", 1, 0)) is None  # files and installed packages change without a run
    cache.remember(req, ("s", 1, 0), ProbeResult(time_capped=True))
    assert cache.reuse(req, ("s", 1, 0)) == res  # cut short by the time budget: not kept
    cache.remember(req, ("s", 2, 0), res)
    assert cache.reuse(req, ("s", 1, 0)) is None and cache.reuse(req, ("s", 2, 0)) == res
    cache.clear()
    assert cache.reuse(req, ("s", 2, 0)) is None


def test_watch_counts_what_may_change_the_kernel_state(tmp_path):
    from crane.lsp.kernel_watch import KernelWatch

    ports = []
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cf = tmp_path / "kernel-silent.json"  # nobody serves these ports: the messages below are all it sees
    cf.write_text(json.dumps({"shell_port": ports[0], "iopub_port": ports[1], "stdin_port": ports[2],
                              "control_port": ports[3], "hb_port": ports[4], "ip": "127.0.0.1", "key": "k",
                              "transport": "tcp", "signature_scheme": "hmac-sha256"}))
    watch = KernelWatch(str(cf), lambda e: None, ignore_sessions={"crane"})
    watch.alive = False  # no heartbeat here
    watch.start()

    def status(state, parent_type, session="vscode"):
        watch._handle({"msg_type": "status", "content": {"execution_state": state},
                       "parent_header": {"msg_id": f"m{watch.activity}{parent_type}", "msg_type": parent_type,
                                         "session": session}})

    for parent_type in ("execute_request", "comm_msg", "comm_open", "debug_request"):
        before = watch.activity
        status("busy", parent_type)
        status("idle", parent_type)
        assert watch.activity == before + 1, parent_type
    before = watch.activity
    for parent_type in ("kernel_info_request", "complete_request", "inspect_request", "comm_info_request"):
        status("busy", parent_type)
    status("busy", "execute_request", session="crane")  # CRANE's own private requests
    assert watch.activity == before
    status("restarting", "")
    assert watch.activity == before + 1
    watch.stop()
    watch.join(5)


def test_chain_at():
    assert chain_at("x = df.shape[0]", 5) == ("df", 4, 6)
    assert chain_at("x = df.shape[0]", 9) == ("df.shape", 4, 12)
    assert chain_at("foo().bar", 7) is None
    assert chain_at("if x:", 1) is None


def test_finding_to_diagnostic_maps_lines_and_related_cells():
    from crane.lsp.diagnostics import to_diagnostic

    cells = (
        CellSnapshot(1, "cell-1", True, "x = 1\n", 1),
        CellSnapshot(2, "cell-2#%3D", True, "a\nprint(y)\n", 3),
    )
    snap = NotebookSnapshot("nb", None, 1, cells)
    f = Finding(rule="undefined-name", ename="NameError", message="name 'y' is not defined", line=2, col=6, end_line=2, end_col=7,
                related=[Related(message="defined in cell 1", cell=1, line=1)])
    d = to_diagnostic(f, cells[1], snap, "live")
    assert (d.range.start.line, d.range.start.character, d.range.end.character) == (1, 6, 7)
    assert d.message == "NameError: name 'y' is not defined" and d.source == "crane" and d.code == "undefined-name"
    assert d.related_information is not None
    assert d.related_information[0].location.uri == "cell-1"
    d2 = to_diagnostic(Finding(rule="r", ename="KeyError", message="KeyError: 'k'", line=1), cells[1], snap, "stale")
    assert d2.data is not None
    assert d2.message == "KeyError: 'k'" and d2.range.end.character == 1 and d2.data["facts"] == "stale"


def test_columns_count_characters_and_the_lsp_gets_utf16_units():
    """ast reports UTF-8 byte columns; findings carry characters; LSP positions count UTF-16 code units."""
    from crane.analysis.cell import analyze_cell
    from crane.lsp.diagnostics import to_diagnostic
    from crane.lsp.notebook_map import char_col, utf16_col
    from crane.predict import predict

    source = "print('héllo 😀', undefined_x)\n"
    from crane.probe.facts import ProbeResult

    found = predict(analyze_cell(source), ProbeResult(undefined=["undefined_x"]))
    assert [(f.rule, f.col, f.end_col) for f in found] == [("undefined-name", 17, 28)]  # characters
    assert source[17:28] == "undefined_x"
    cell = CellSnapshot(1, "cell-1", True, source, 1)
    d = to_diagnostic(found[0], cell, NotebookSnapshot("nb", None, 1, (cell,)), "static")
    assert (d.range.start.character, d.range.end.character) == (18, 29)  # the emoji is two UTF-16 units
    line = source.rstrip("\n")
    assert all(char_col(line, utf16_col(line, i)) == i for i in range(len(line) + 1))


def test_serve_over_tcp(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(REPO / "server"), JUPYTER_RUNTIME_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "crane", "serve", "--tcp", f"127.0.0.1:{port}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        # until the server listens (its imports took over 15 s at load 25 in a CI run: a wall-clock deadline that
        # short made the test depend on the machine's speed); a server that exited fails at once
        deadline = time.monotonic() + 240
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert proc.poll() is None, f"the server exited ({proc.returncode}) before it listened"
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}}).encode()
        conn.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = b""
        while b"serverInfo" not in data:
            chunk = conn.recv(65536)
            assert chunk, "connection closed"
            data += chunk
        assert b'"name": "crane"' in data
        conn.close()
    finally:
        proc.kill()
        out = proc.communicate(timeout=120)[0]  # killed: the bound ends a failing test
    assert out == b""  # nothing on stdout in TCP mode either


def test_serve_rejects_a_bad_tcp_address():
    r = subprocess.run([sys.executable, "-m", "crane", "serve", "--tcp", "nope"], capture_output=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO / "server")))
    assert r.returncode == 2 and b"HOST:PORT" in r.stderr


def test_process_exists_sees_exit_and_zombies():
    from crane.lsp.kernel_watch import process_exists

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process_exists(proc.pid)
        proc.kill()
        deadline = time.monotonic() + 60  # an event waited for; the bound ends a failing test
        while process_exists(proc.pid) and time.monotonic() < deadline:  # a zombie until reaped: still "gone"
            time.sleep(0.05)
        assert not process_exists(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not process_exists(proc.pid)


def test_watch_reports_a_restart_when_the_kernel_process_is_gone_even_if_iopub_is_silent(tmp_path):
    """A SUB socket can miss a restarted kernel's first iopub messages; the vanished pid still tells."""
    from crane.lsp.kernel_watch import KernelWatch, WatchEvent

    # A connection file whose ports nobody serves: iopub and heartbeat stay silent.
    ports = []
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cf = tmp_path / "kernel-silent.json"
    cf.write_text(json.dumps({"shell_port": ports[0], "iopub_port": ports[1], "stdin_port": ports[2],
                              "control_port": ports[3], "hb_port": ports[4], "ip": "127.0.0.1", "key": "k",
                              "transport": "tcp", "signature_scheme": "hmac-sha256"}))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    events: list[WatchEvent] = []
    watch = KernelWatch(str(cf), events.append, heartbeat_interval=0.1, local_pid=proc.pid)
    watch.alive = False  # no heartbeat here: only the process check can speak
    watch.start()
    try:
        time.sleep(0.5)
        assert not [e for e in events if e.kind == "restarted"]
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60  # an event waited for; the bound ends a failing test
        while not [e for e in events if e.kind == "restarted"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [e.kind for e in events if e.kind == "restarted"] == ["restarted"]
    finally:
        watch.stop()
        watch.join(5)
        proc.kill()

"""`crane mcp` as agents really run it, with the MCP SDK's own client over stdio against real kernels: the server
starts before its kernel exists (tools listed, a call says why, the next call after the kernel starts answers
from it), follows a kernel restart with a new connection file (a glob, the newest kernel in the runtime folder),
honours `notifications/cancelled` (the run's processes end; reads never wait behind a run), says `unknown` when
neither facts nor a run decided, answers every request (bad arguments as `isError` results, malformed JSON as
JSON-RPC errors), and replays `--notebook` in the background. The kernels are proven unchanged
(`crane.kernel.untouched`)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched

from ..cli.conftest import make_notebook
from .conftest import mcp_client

WAIT_S = 120.0  # generous: the machine may be loaded; every wait below ends on an event


def _publish(kernel, path: Path) -> Path:
    """Put the kernel's connection file at `path` (written whole, then renamed: as Jupyter writes them)."""
    tmp = path.with_suffix(".tmp")
    shutil.copyfile(kernel.manager.connection_file, tmp)
    os.replace(tmp, path)
    return path


def _text(res) -> str:
    return res.content[0].text


async def _until(predicate, what: str, timeout: float = WAIT_S):
    """Poll `predicate` (a cheap local check) until it is truthy; fail after `timeout`."""
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await anyio.sleep(0.05)
    raise AssertionError(what)  # pragma: no cover


async def test_starts_before_the_kernel_and_answers_once_it_runs(tmp_path):
    cf = tmp_path / "runtime" / "kernel-mine.json"
    cf.parent.mkdir()
    async with mcp_client("--connection-file", str(cf)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "crane_kernel_facts" in names
        missing = await client.call_tool("crane_kernel_facts", {})
        assert missing.is_error and "does not exist" in _text(missing) and str(cf) in _text(missing)
        assert "again on every call" in _text(missing)
        pred = await client.call_tool("crane_check_code", {"code": "1/0", "mode": "static"})
        assert pred.is_error and "does not exist" in _text(pred)
        k = start_kernel(tmp_path)
        try:
            k.connection.run_cell("late = 7", timeout=60)
            _publish(k, cf)
            with Untouched(k.connection) as check:
                facts = (await client.call_tool("crane_kernel_facts", {"names": ["late"]})).structured_content
                assert facts["facts"]["late"]["value"] == "7", facts
            assert check.unchanged, check.changes()
        finally:
            k.shutdown()
        gone = await client.call_tool("crane_kernel_facts", {})
        assert gone.is_error and "kernel" in _text(gone)


@pytest.mark.parametrize("how", ["glob", "newest"])
async def test_follows_a_restart_with_a_new_connection_file(tmp_path, how):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    args: tuple[str, ...]
    env: dict[str, str] | None
    if how == "glob":
        args, env = ("--connection-file", str(runtime / "kernel-*.json")), None
    else:  # the runtime folders of an isolated user: only this test's kernels are there
        args = ("--newest-kernel",)
        env = {"HOME": str(home), "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTER_DATA_DIR": str(home / "data")}
    first = start_kernel(tmp_path)
    second = None
    try:
        first.connection.run_cell("which = 'first'", timeout=60)
        _publish(first, runtime / "kernel-first.json")
        async with mcp_client(*args, env=env) as client:
            facts = (await client.call_tool("crane_kernel_facts", {"names": ["which"]})).structured_content
            assert facts["facts"]["which"]["value"] == "'first'", facts
            first.shutdown()  # the user restarts: a new kernel, a new connection file; the old file stays
            second = start_kernel(tmp_path)
            second.connection.run_cell("which = 'second'", timeout=60)
            newer = _publish(second, runtime / "kernel-second.json")
            old = os.stat(runtime / "kernel-first.json").st_mtime_ns
            os.utime(newer, ns=(old + 10**9, old + 10**9))
            with Untouched(second.connection) as check:
                res = await client.call_tool("crane_kernel_facts", {"names": ["which"]})
                assert not res.is_error, _text(res)
                assert res.structured_content["facts"]["which"]["value"] == "'second'"
                run = (await client.call_tool("crane_try_code", {"code": "print(which)"})).structured_content
                assert run["outcome"] == "no-crash" and run["stdout"].strip() == "second", run
            assert check.unchanged, check.changes()
    finally:
        first.shutdown()
        if second is not None:
            second.shutdown()


def _descendants(pid: int) -> set[int]:
    """Live (not zombie) descendants of `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_cancel_ends_the_run_and_reads_never_wait_behind_it(kernel, conn):
    kpid = kernel.manager.provisioner.process.pid
    before = _descendants(kpid)
    outcome: dict[str, object] = {}
    with Untouched(conn) as check:
        async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def endless() -> None:
                    with scope:
                        outcome["run"] = await client.call_tool(
                            "crane_try_code", {"code": "import time\nwhile True:\n    time.sleep(0.05)",
                                               "budget_s": 600})

                tg.start_soon(endless)
                run_pids = await _until(lambda: _descendants(kpid) - before, "the sandbox run never started")
                facts = await client.call_tool("crane_kernel_facts", {"names": ["n"]})  # a read, mid-run
                assert not facts.is_error and facts.structured_content["facts"]["n"]["value"] == "42"
                static = (await client.call_tool("crane_check_code", {"code": "df['Price']", "mode": "static"})
                          ).structured_content
                assert static["prediction"] == "crash", static
                assert "run" not in outcome and all(_alive(p) for p in run_pids)  # the run still went on
                scope.cancel()  # the SDK sends notifications/cancelled
            assert "run" not in outcome
            await _until(lambda: not any(_alive(p) for p in run_pids), "the cancelled run's processes live on")
            again = (await client.call_tool("crane_try_code", {"code": "print(n + 1)"})).structured_content
            assert again["outcome"] == "no-crash" and again["stdout"].strip() == "43", again
    assert check.unchanged, check.changes()


async def test_progress_notifications_during_a_long_run(kernel):
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
        res = await client.call_tool("crane_try_code", {"code": "import time\ntime.sleep(5)", "budget_s": 60},
                                     progress_callback=progress)
        assert res.structured_content["outcome"] == "no-crash", res.content
    assert seen, "no progress notification during a 5 s run"
    assert seen[0][1] == 60 and "crane_try_code" in (seen[0][2] or "")


async def test_unknown_when_neither_facts_nor_a_run_decide(kernel, conn, tmp_path):
    async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
        loop = (await client.call_tool("crane_check_code", {"code": "while True:\n    pass", "budget_s": 2})
                ).structured_content
        assert loop["prediction"] == "unknown" and loop["decided_by"] == "none", loop
        assert loop["sandbox"]["outcome"] == "timeout" and loop["how"].startswith("unknown")
        clean = (await client.call_tool("crane_check_code", {"code": "x = n + 1"})).structured_content
        assert clean["prediction"] == "no-crash" and clean["decided_by"] == "sandbox"
    busy = start_kernel(tmp_path)
    flag = tmp_path / "user-cell-may-end"
    try:
        busy.connection.run_cell("v = 1", timeout=60)
        async with mcp_client("--connection-file", str(busy.manager.connection_file)) as client:
            assert not (await client.call_tool("crane_kernel_facts", {"names": ["v"]})).is_error
            # the user's own cell runs (their front-end sent it); it ends when the test says so
            busy.manager.client().execute(f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n"
                                          "    time.sleep(0.05)")
            static = (await client.call_tool("crane_check_code", {"code": "v + 1", "mode": "static"})
                      ).structured_content
            assert static["prediction"] == "unknown" and static["facts_mode"] != "live", static
            auto = (await client.call_tool("crane_check_code", {"code": "v + 1", "budget_s": 5})).structured_content
            assert auto["prediction"] in ("unknown", "no-crash"), auto
            if auto["prediction"] == "no-crash":  # a fork of the busy kernel may still run it
                assert auto["decided_by"] == "sandbox", auto
            flag.write_text("done")
    finally:
        flag.write_text("done")
        busy.shutdown()


async def test_bad_arguments_are_error_results_the_model_can_read(kernel, notebook):
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("crane_try_code", {}, "code"),
        ("crane_try_code", {"code": 3}, "Expected `str`"),
        ("crane_try_code", {"code": "1", "budget_s": -1}, "budget_s"),
        ("crane_try_code", {"code": "1", "budget_s": "soon"}, "budget_s"),
        ("crane_check_cell", {"notebook": str(notebook), "cell": 0}, "cell"),
        ("crane_kernel_facts", {"names": "df"}, "names"),
        ("crane_kernel_facts", {"surprise": 1}, "surprise"),
        ("crane_check_code", {"code": "1", "mode": "fast"}, "mode"),
    ]
    async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
        for name, args, says in bad:
            res = await client.call_tool(name, args)
            assert res.is_error and "invalid arguments" in _text(res) and says in _text(res), (name, args, res)
        ok = await client.call_tool("crane_kernel_facts", {"names": ["n"]})
        assert ok.structured_content["facts"]["n"]["type"] == "int"


async def test_schemas_have_a_type_and_a_description_on_every_property(kernel):
    async with mcp_client("--connection-file", str(kernel.manager.connection_file)) as client:
        for tool in (await client.list_tools()).tools:
            for name, prop in tool.input_schema["properties"].items():
                assert "type" in prop and prop.get("description"), (tool.name, name, prop)
            prediction = (tool.output_schema or {}).get("properties", {}).get("prediction")
            if prediction:
                assert set(prediction["enum"]) == {"crash", "no-crash", "unknown"}


def _raw_session(*args: str):
    proc = subprocess.Popen([sys.executable, "-m", "crane", "mcp", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout

    def pump() -> None:
        for ln in out:
            lines.put(ln)

    threading.Thread(target=pump, daemon=True).start()

    def send(text: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(text + "\n")
        proc.stdin.flush()

    def answer() -> dict:
        return json.loads(lines.get(timeout=WAIT_S))

    return proc, send, answer


def test_every_request_is_answered_malformed_json_included(tmp_path):
    proc, send, answer = _raw_session("--connection-file", str(tmp_path / "kernel-none.json"))
    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}))
        assert answer()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        # a JSON-escaped lone surrogate: valid JSON, not Unicode text
        send('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"crane_try_code",'
             '"arguments":{"code":"x = \'\\ud800\'"}}}')
        got = answer()
        assert got["id"] == 2 and got["result"]["isError"] is True, got
        assert "surrogate" in got["result"]["content"][0]["text"] and "code" in got["result"]["content"][0]["text"]
        send('{"jsonrpc":"2.0","id":3,"method":')  # cut short
        got = answer()
        assert got["id"] is None and got["error"]["code"] == -32700, got
        send('{"id": 4, "hello": "there"}')
        got = answer()
        assert got["id"] == 4 and got["error"]["code"] == -32600, got
        send(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        got = answer()
        assert got["id"] == 5 and got["result"]["tools"], got
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)
    assert proc.returncode == 0


async def test_notebook_replays_in_the_background(tmp_path):
    flag = tmp_path / "history-may-end"
    nb = make_notebook(tmp_path / "slow.ipynb", [
        ("ready = 0", 1),
        (f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)\nready = 1", 2),
        ("ready + never_defined", None),
    ])
    try:
        async with mcp_client("--notebook", str(nb), "--replay-wait", "1") as client:
            assert {t.name for t in (await client.list_tools()).tools}  # answered while the history replays
            pending = (await client.call_tool("crane_check_cell", {"cell": 3, "mode": "static"})).structured_content
            assert pending["prediction"] == "unknown" and "replaying" in pending["how"], pending
            facts = await client.call_tool("crane_kernel_facts", {"names": ["ready"]})
            assert facts.is_error and "replaying" in _text(facts), _text(facts)
            flag.write_text("done")
            with anyio.fail_after(WAIT_S):
                while True:
                    res = await client.call_tool("crane_kernel_facts", {"names": ["ready"]})
                    if not res.is_error:
                        break
                    assert "replay" in _text(res), _text(res)
            assert res.structured_content["facts"]["ready"]["value"] == "1"
            cell = (await client.call_tool("crane_check_cell", {"cell": 3, "mode": "static"})).structured_content
            assert cell["prediction"] == "crash", cell
    finally:
        flag.write_text("done")


def test_usage_errors_still_exit_2_before_serving():
    r = subprocess.run([sys.executable, "-m", "crane", "mcp", "--newest-kernel", "--connection-file", "x.json"],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "give one kernel" in r.stderr and r.stdout == ""


async def test_kernel_of_a_notebook_vscode_runs(tmp_path):
    runtime, home = tmp_path / "runtime", tmp_path / "home"
    runtime.mkdir()
    home.mkdir()
    env = {"HOME": str(home), "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTER_DATA_DIR": str(home / "data")}
    mine, other = tmp_path / "mine.ipynb", tmp_path / "other.ipynb"
    kernels = []
    try:
        for nb, value in ((other, "'other'"), (mine, "'mine'")):
            k = start_kernel(tmp_path)
            kernels.append(k)
            # what VS Code's Jupyter extension does in the kernels it starts for a notebook
            k.connection.run_cell(f"__vsc_ipynb_file__ = {str(nb)!r}\nwhich = {value}", timeout=60)
            _publish(k, runtime / f"kernel-{nb.stem}.json")
        older = os.stat(runtime / "kernel-mine.json").st_mtime_ns
        os.utime(runtime / "kernel-other.json", ns=(older + 10**9, older + 10**9))  # the newest is the other one
        async with mcp_client("--kernel-of", str(mine), env=env) as client:
            with Untouched(kernels[1].connection) as check:
                facts = (await client.call_tool("crane_kernel_facts", {"names": ["which"]})).structured_content
                assert facts["facts"]["which"]["value"] == "'mine'", facts
            assert check.unchanged, check.changes()
        async with mcp_client("--kernel-of", str(tmp_path / "none.ipynb"), env=env) as client:
            res = await client.call_tool("crane_kernel_facts", {})
            assert res.is_error and "no running kernel says it belongs to" in _text(res), _text(res)
    finally:
        for k in kernels:
            k.shutdown()

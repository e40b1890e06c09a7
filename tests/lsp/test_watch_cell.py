"""The kernel watch's `cell_running` (what the LM tools call busy, `lm_tools.py`): another client's execute request
that is not silent (its `execute_input` shown), until its `idle`; a silent one (the Jupyter extension's variable
view) is no cell though `busy` counts it; any execute request that starts, the daemon's own included, ends the cell
known to run (one request at a time: a missed `idle` is forgotten, never kept); a restart forgets it. The watch's
iopub handler fed the kernel's messages in order (the real-kernel path: tests/lsp/test_lm_tools.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from crane.lsp.kernel_watch import KernelWatch


@pytest.fixture
def watch(tmp_path) -> Iterator[KernelWatch]:
    ports = []
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cf = tmp_path / "kernel-silent.json"  # nobody serves these ports: the messages below are all it sees
    cf.write_text(json.dumps({"shell_port": ports[0], "iopub_port": ports[1], "stdin_port": ports[2],
                              "control_port": ports[3], "hb_port": ports[4], "ip": "127.0.0.1", "key": "k",
                              "transport": "tcp", "signature_scheme": "hmac-sha256"}))
    w = KernelWatch(str(cf), lambda e: None, ignore_sessions={"crane"})
    w.alive = False  # no heartbeat here
    w.start()
    yield w
    w.stop()
    w.join(5)


def _msg(watch: KernelWatch, kind: str, msg_id: str, session: str = "vscode", **content) -> None:
    watch._handle({"msg_type": kind, "content": content,
                   "parent_header": {"msg_id": msg_id, "msg_type": "execute_request", "session": session}})


def test_a_cell_is_a_non_silent_execute_request_until_its_idle(watch):
    _msg(watch, "status", "view", execution_state="busy")  # the variable view: silent, no execute_input
    assert watch.busy and not watch.cell_running
    _msg(watch, "status", "view", execution_state="idle")
    _msg(watch, "status", "cell", execution_state="busy")
    assert watch.busy and not watch.cell_running  # its execute_input comes next
    _msg(watch, "execute_input", "cell", code="x = 1", execution_count=1)
    assert watch.cell_running
    _msg(watch, "stream", "cell", name="stdout", text="1\n")
    assert watch.cell_running
    _msg(watch, "status", "cell", execution_state="idle")
    assert not watch.busy and not watch.cell_running


def test_a_missed_idle_is_forgotten_at_the_next_request_and_at_a_restart(watch):
    _msg(watch, "status", "a", execution_state="busy")
    _msg(watch, "execute_input", "a", code="x = 1", execution_count=1)
    assert watch.cell_running
    _msg(watch, "status", "ours", session="crane", execution_state="busy")  # the daemon's own private request
    assert not watch.cell_running
    _msg(watch, "status", "b", execution_state="busy")
    _msg(watch, "execute_input", "b", code="y = 2", execution_count=2)
    assert watch.cell_running
    watch._handle({"msg_type": "status", "content": {"execution_state": "starting"}, "parent_header": {}})
    assert not watch.cell_running

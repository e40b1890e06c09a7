"""The Landlock read rules a portable head makes ahead (kernel/landlock.prepare_reads, worker/linux.prepare_read_layer,
taken by its next run's process in `confine_worker`), for real.

- The layer alone, with no Python guard: a process confined from prepared rules refuses and allows exactly what one
  confined afresh does (a file of the hidden folder unreadable, writes only in its own folder, no exec, a rename
  across its own folders allowed), reads a file made after the rules were prepared, and says it used them. Where
  a folder granted when the rules were made has since been moved onto the way to the hidden folder, the prepared
  rules are not used (they would let its files be read), nor where one has been moved below the hidden folder: the
  whole ruleset is made afresh and the files stay hidden.
- Through a real head (IPython 8 and 9 kernels): a file made next to the kernel's connection file between two warm
  verdicts is read by the second run, the connection file by neither (refused: `blocked`).
Skipped where Landlock is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(linux_layer_available() is not None, reason=str(linux_layer_available()))

RAW = r"""
import ctypes, json, os, sys
from crane.sandbox.worker import linux
mode, root = sys.argv[1:3]
run, hidden, outside = f"{root}/run", f"{root}/share/runtime", f"{root}/outside"
if mode != "fresh":
    linux.prepare_read_layer([hidden])
    assert linux._READ_RULES.get("fd") is not None
open(f"{root}/late.txt", "w").write("made after the preparation")
if mode == "moved":  # a folder granted when the rules were made is now on the way to the hidden folder
    os.rename(f"{root}/share", f"{root}/share-old")
    os.rename(f"{root}/decoy", f"{root}/share")
if mode == "below":  # ... or moved below the hidden folder
    os.rename(f"{root}/decoy", f"{hidden}/decoy")
info = linux.confine_worker([run], [hidden])
libc = ctypes.CDLL(None, use_errno=True)
def rc(v):
    return "ok" if v >= 0 else os.strerror(ctypes.get_errno())
out = {"prepared": bool(info.get("prepared")), "left": dict(linux._READ_RULES)}
out["read hidden"] = rc(libc.open(f"{hidden}/kernel-1.json".encode(), os.O_RDONLY))
out["read moved below"] = rc(libc.open(f"{hidden}/decoy/runtime/kernel-1.json".encode(), os.O_RDONLY))
out["read late"] = open(f"{root}/late.txt").read()
out["read elsewhere"] = open(f"{outside}/target.txt").read()
out["create outside"] = rc(libc.open(f"{outside}/new.txt".encode(), os.O_WRONLY | os.O_CREAT, 0o644))
out["write inside"] = rc(libc.open(f"{run}/a/mine.txt".encode(), os.O_WRONLY | os.O_CREAT, 0o644))
out["rename inside"] = rc(libc.rename(f"{run}/a/mine.txt".encode(), f"{run}/b/mine.txt".encode()))
out["read inside"] = rc(libc.open(f"{run}/b/mine.txt".encode(), os.O_RDONLY))
out["exec"] = libc.system(f"touch {outside}/pwned".encode())
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", ["fresh", "prepared", "moved", "below"])
def test_prepared_read_rules_confine_as_a_fresh_ruleset(tmp_path, mode):
    for d in ("run/a", "run/b", "share/runtime", "outside", "decoy/runtime"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "share/runtime/kernel-1.json").write_text('{"key": "secret"}')
    (tmp_path / "decoy/runtime/kernel-1.json").write_text('{"key": "moved here"}')
    (tmp_path / "outside/target.txt").write_text("readable")
    res = subprocess.run([sys.executable, "-c", RAW, mode, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["prepared"] is (mode == "prepared"), out  # moved: made afresh, never the stale rules
    assert out["left"] == {}, out  # the prepared rules are gone from the process once it is confined
    assert out["read hidden"] == "Permission denied", out
    assert out["read moved below"] == ("Permission denied" if mode == "below" else "No such file or directory"), out
    assert (out["read late"], out["read elsewhere"]) == ("made after the preparation", "readable"), out
    assert out["create outside"] == "Permission denied", out
    assert (out["write inside"], out["rename inside"], out["read inside"]) == ("ok", "ok", "ok"), out
    assert out["exec"] != 0 and not (tmp_path / "outside/pwned").exists() and not (tmp_path / "outside/new.txt").exists()


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_head_run_reads_a_file_made_after_its_rules_were_prepared(kernel_env, tmp_path, monkeypatch):
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    late = None
    try:
        conn = kernel.connection
        conn_file = conn.evaluate("__import__('ipykernel.connect').connect.get_connection_file()")
        assert os.path.isabs(conn_file), conn_file
        cell = f"open({conn_file!r}).read()"
        first = speculate(conn, cell, 60.0, sandbox=opts)  # (this run's head prepares the next run's read rules)
        assert (first.verdict, first.ename) == ("blocked", "PermissionError"), first
        late = os.path.join(os.path.dirname(conn_file), f"crane-late-{os.getpid()}-{kernel_env}.txt")
        with open(late, "w") as f:  # next to the connection file, after the head prepared the rules
            f.write("made between the runs")
        second = speculate(conn, f"print(open({late!r}).read())\n{cell}", 60.0, sandbox=opts)
        assert (second.verdict, second.ename, second.pid) == ("blocked", "PermissionError", first.pid), second
        assert second.transplant is not None and second.transplant.warm and "landlock" in second.transplant.layers
        assert second.stdout.startswith("made between the runs"), second.stdout
    finally:
        if late is not None and os.path.exists(late):
            os.remove(late)
        kernel.shutdown()
        POOL.shutdown()

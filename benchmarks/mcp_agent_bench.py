#!/usr/bin/env python3
"""Benchmark: `crane mcp` as agents run it (issue 31), through the official MCP SDK client over stdio.

Measures, on this machine: the handshake and tool list with no kernel yet, and a call's `isError` answer; facts
calls while an endless sandbox run is in flight (they never wait behind it); the time from a client's cancel to
the run's processes being gone, and the next facts call; `--notebook` whose history holds a 20 s cell:
`initialize` answered at once, and a check during the replay answering `unknown` with the replay's progress.

Usage: .venv/bin/python benchmarks/mcp_agent_bench.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from crane.kernel.manager import start_kernel

_ENV = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")


def params(*args: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k in _ENV}
    return StdioServerParameters(command=sys.executable, args=["-m", "crane", "mcp", *args], env=env)


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(pid: int) -> set[int]:
    """The live (not zombie) descendants of `pid`."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


async def no_kernel(folder: str) -> None:
    t0 = time.monotonic()
    async with Client(params("--connection-file", os.path.join(folder, "kernel-none.json")),
                      read_timeout_seconds=300) as c:
        tools = await c.list_tools()
        t1 = time.monotonic()
        r = await c.call_tool("crane_kernel_facts", {})
        t2 = time.monotonic()
    print(f"no kernel: initialize + tools/list {t1 - t0:.2f} s ({len(tools.tools)} tools); a call: "
          f"isError={r.is_error} in {(t2 - t1) * 1000:.0f} ms")


async def cancel_and_reads(folder: str) -> None:
    k = start_kernel(folder)
    try:
        k.connection.run_cell("x = 1", timeout=60)
        kpid = k.manager.provisioner.process.pid
        async with Client(params("--connection-file", k.manager.connection_file), read_timeout_seconds=300) as c:
            await c.call_tool("crane_kernel_facts", {"names": ["x"]})
            base = descendants(kpid)
            scope = anyio.CancelScope()
            facts: list[float] = []
            async with anyio.create_task_group() as tg:
                async def run() -> None:
                    with scope:
                        await c.call_tool("crane_try_code", {"code": "while True: pass", "budget_s": 600})

                tg.start_soon(run)
                while not (descendants(kpid) - base):
                    await anyio.sleep(0.01)
                pids = descendants(kpid) - base
                for _ in range(5):
                    a = time.monotonic()
                    await c.call_tool("crane_kernel_facts", {"names": ["x"]})
                    facts.append(time.monotonic() - a)
                cancelled = time.monotonic()
                scope.cancel()
            while any(alive(p) for p in pids):
                await anyio.sleep(0.005)
            gone = time.monotonic() - cancelled
            a = time.monotonic()
            await c.call_tool("crane_kernel_facts", {"names": ["x"]})
            after = time.monotonic() - a
        print(f"facts during a sandbox run: median {statistics.median(facts) * 1000:.0f} ms (5 calls, max "
              f"{max(facts) * 1000:.0f} ms)")
        print(f"cancel -> the run's {len(pids)} processes gone: {gone * 1000:.0f} ms; next facts call "
              f"{after * 1000:.0f} ms")
    finally:
        k.shutdown()


async def notebook(folder: str) -> None:
    nb = os.path.join(folder, "slow.ipynb")
    cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
              "source": "import time\ntime.sleep(20)\nready = 1"},
             {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "ready + 1"}]
    with open(nb, "w") as f:
        json.dump({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, f)
    t0 = time.monotonic()
    async with Client(params("--notebook", nb, "--replay-wait", "2"), read_timeout_seconds=300) as c:
        await c.list_tools()
        t1 = time.monotonic()
        p = (await c.call_tool("crane_check_cell", {"cell": 2, "mode": "static"})).structured_content or {}
        t2 = time.monotonic()
    print(f"--notebook (a 20 s history cell): initialize + tools/list {t1 - t0:.2f} s; a check during the replay: "
          f"{p.get('prediction')} in {t2 - t1:.1f} s ({str(p.get('how'))[:100]})")


async def main() -> None:
    folder = tempfile.mkdtemp(prefix="crane-mcp-bench-")
    await no_kernel(folder)
    await cancel_and_reads(folder)
    await notebook(folder)


if __name__ == "__main__":
    anyio.run(main)

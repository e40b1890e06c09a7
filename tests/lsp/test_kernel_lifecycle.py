"""Kernel death and restart: the status says so, diagnostics fall back to static, and the server
reattaches to the kernel when it is back (VS Code keeps the connection file across a restart)."""

from __future__ import annotations

import queue
import time

from jupyter_client.provisioning import LocalProvisioner

from .conftest import Kernel, Notebook, TcpKernel, crane_diags, last_status, start_client, stop_client, wait_for


def iopub_connected(kernel: Kernel, timeout: float = 20.0) -> None:
    """After a restart our iopub socket reconnects on its own: wait until it hears the kernel again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kernel.conn.client.kernel_info()
        try:
            kernel.conn.client.get_iopub_msg(timeout=0.2)
            break
        except queue.Empty:
            continue
    kernel.conn.wait_ready(10)


def restart(kernel: TcpKernel) -> None:
    kernel.km.restart_kernel(now=True)
    kernel.conn.wait_ready(30)
    iopub_connected(kernel)
    kernel.run(f"__vsc_ipynb_file__ = {str(kernel.notebook)!r}")  # VS Code's startup code


async def test_kernel_death_then_restart(runtime_dir, tmp_path):
    kernel = TcpKernel(runtime_dir, tmp_path / "life.ipynb")
    kernel.run("a_var = 1")
    client = await start_client(
        env={"JUPYTER_RUNTIME_DIR": str(runtime_dir), "CRANE_LSP_DISCOVERY_INTERVAL_MS": "300"},
    )
    try:
        nb = Notebook(client, kernel.notebook, ["print(a_var)\n", "print(b_var)\n"])
        await wait_for(lambda: (s := last_status(client, nb.uri)) and s.kernel is not None, timeout=15, what="attached")
        await wait_for(lambda: crane_diags(client, nb.cells[1]), what="NameError b_var (live)")
        await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="a_var defined in the kernel")

        assert isinstance(kernel.km.provisioner, LocalProvisioner) and kernel.km.provisioner.process is not None
        kernel.km.provisioner.process.kill()  # the kernel dies (SIGKILL)
        await wait_for(lambda: last_status(client, nb.uri).state == "dead", timeout=60, what="dead status")
        d0 = await wait_for(lambda: crane_diags(client, nb.cells[0]), what="static diagnostics once the kernel is gone")
        assert d0[0].data["facts"] == "static"

        restart(kernel)  # it comes back behind the same connection file, with a fresh namespace
        kernel.run("b_var = 2")
        await wait_for(
            lambda: (s := last_status(client, nb.uri)) and s.state in ("attached", "idle") and s.kernel is not None,
            timeout=20,
            what="reattached",
        )
        await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], timeout=10, what="b_var from the new kernel")
        d0 = await wait_for(lambda: (d := crane_diags(client, nb.cells[0])) and d[0].data["facts"] == "live" and d, what="a_var gone")
        assert d0[0].code == "undefined-name"

        # A restart while attached (no time to miss a heartbeat): the fresh namespace is noticed.
        restart(kernel)
        await wait_for(
            lambda: (d := crane_diags(client, nb.cells[1])) and d[0].data["facts"] == "live" and d,
            timeout=20,
            what="b_var gone after the restart",
        )
    finally:
        await stop_client(client)
        kernel.shutdown()

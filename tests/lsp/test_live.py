"""Attached to a real kernel: live squiggles that follow the kernel's state, a busy kernel, discovery by
`__vsc_ipynb_file__`, configuration changes. (Hover, code actions, commands and sync: tests/lsp/features.)"""

from __future__ import annotations

from lsprotocol import types

from .conftest import SETUP, Kernel, Notebook, attach, crane_diags, last_status, start_client, stop_client, wait_for


async def test_live_squiggles_follow_the_kernel(client, live_kernel, notebook_path):
    nb = Notebook(client, notebook_path, [SETUP, "total = df['c'].sum()\n", "print(model_x)\n"])
    await attach(client, nb, live_kernel)
    status = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state in ("attached", "idle") and s, what="attached")
    assert status.kernel.connectionFile == live_kernel.connection_file

    d1 = await wait_for(lambda: crane_diags(client, nb.cells[1]), what="KeyError on cell 2")
    assert d1[0].message.startswith("KeyError") and d1[0].range.start.line == 0
    d2 = await wait_for(
        lambda: (d := crane_diags(client, nb.cells[2])) and d[0].data["facts"] == "live" and d, what="live NameError on cell 3"
    )
    assert d2[0].code == "undefined-name"

    # The user runs a cell (another client of the kernel, as VS Code would): the squiggle goes away.
    live_kernel.run("model_x = 42")
    await wait_for(lambda: crane_diags(client, nb.cells[2]) == [], what="NameError gone after the kernel defined it")
    live_kernel.run("df['c'] = 0")
    await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="KeyError gone after the column appeared")
    live_kernel.run("del model_x")
    await wait_for(lambda: crane_diags(client, nb.cells[2]), what="NameError back after del")

    # An edit re-checks against the live kernel.
    nb.set_text(2, "print(df.shape)\nprint(df['zzz'])\n")
    d = await wait_for(lambda: (x := crane_diags(client, nb.cells[2])) and x[0].range.start.line == 1 and x, what="KeyError on line 2")
    assert d[0].message.startswith("KeyError")


async def test_busy_kernel_uses_stale_facts_without_waiting(client, live_kernel, notebook_path, tmp_path):
    nb = Notebook(client, notebook_path, ["print(df.shape)\nprint(never_defined)\n"])
    await attach(client, nb, live_kernel)
    await wait_for(
        lambda: (d := crane_diags(client, nb.cells[0])) and len(d) == 1 and d[0].data["facts"] == "live",
        what="NameError from live facts",
    )
    # a long user cell: it runs until the test lets it end (a file), so diagnostics that came meanwhile did not wait
    # for it (a 3 s cell and a 1.5 s bound measured the machine's load)
    release = tmp_path / "release-the-cell"
    msg_id = live_kernel.conn.client.execute(
        f"while not __import__('os').path.exists({str(release)!r}):\n    __import__('time').sleep(0.02)\n")
    try:
        await wait_for(lambda: last_status(client, nb.uri).state == "busy", what="busy status")
        nb.set_text(0, "\nprint(df.shape)\nprint(never_defined)\n")
        d = await wait_for(
            lambda: (x := crane_diags(client, nb.cells[0])) and x[0].range.start.line == 2 and x,
            what="diagnostics while busy",
        )
        assert {x.data["facts"] for x in d} == {"stale"}
        await wait_for(lambda: last_status(client, nb.uri).stale, what="status says stale")
        # all of it while the cell still ran: only the file below lets it end
    finally:
        release.touch()
        live_kernel.conn._shell_reply(msg_id, 120, "the released cell")
    await wait_for(lambda: last_status(client, nb.uri).state == "idle", what="idle again")


async def test_discovery_by_vsc_ipynb_file(kernel, runtime_dir, notebook_path, tmp_path):
    # A second kernel in the same runtime dir, for another notebook: discovery must pick the right one.
    other = Kernel(runtime_dir, tmp_path / "other.ipynb")
    try:
        client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(runtime_dir)})
        try:
            nb = Notebook(client, notebook_path, ["print(df.shape)\n"])
            status = await wait_for(
                lambda: (s := last_status(client, nb.uri)) and s.kernel is not None and s, timeout=15, what="discovered kernel"
            )
            assert status.kernel.source == "discovery"
            assert status.kernel.connectionFile == kernel.connection_file
            assert status.kernel.notebookPath == str(notebook_path)
            nb2 = Notebook(client, tmp_path / "other.ipynb", ["print(1)\n"])
            s2 = await wait_for(lambda: (s := last_status(client, nb2.uri)) and s.kernel is not None and s, timeout=15, what="second")
            assert s2.kernel.connectionFile == other.connection_file
        finally:
            await stop_client(client)
    finally:
        other.shutdown()


async def test_configuration_change_of_mode_and_kernel(client, live_kernel, notebook_path, tmp_path):
    nb = Notebook(client, notebook_path, ["print(df.shape)\n"])
    await wait_for(lambda: (s := last_status(client, nb.uri)) and s.state == "static-only", what="no kernel found")
    # crane.kernel.connectionFile attaches (order (c))
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"crane": {"mode": "static", "kernel": {"connectionFile": live_kernel.connection_file}}})
    )
    s = await wait_for(lambda: (s := last_status(client, nb.uri)) and s.kernel is not None and s, timeout=15, what="attached by setting")
    assert s.kernel.source == "setting"
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="df known to the kernel")
    # an invalid value: one warning, that key's default, the rest kept
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"crane": {"mode": "turbo", "kernel": {"connectionFile": live_kernel.connection_file}}})
    )
    await wait_for(lambda: any("crane.mode" in m.message for m in client.messages), what="warning about crane.mode")
    assert last_status(client, nb.uri).kernel is not None

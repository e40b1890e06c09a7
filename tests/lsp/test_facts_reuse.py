"""No re-probing while nothing ran: edits of a cell are answered from the facts already read, live, without a
round trip to the kernel; and every way the kernel's state can change is seen on the next check (a visible run
that mutates in place, another client's silent execution, an expression-only request, a restart is covered by
test_kernel_lifecycle)."""

from __future__ import annotations

import pytest

from .conftest import Notebook, attach, crane_diags, last_status, wait_for

SETUP = "import pandas as pd\nreuse_df = pd.DataFrame({'a': [1.0, 2.0, 3.0]})\n"
PROBE_CALLS = "__import__('sys').modules['_crane_probe'].STATS['calls']"
PROBE_CALLS_SO_FAR = "getattr(__import__('sys').modules.get('_crane_probe'), 'STATS', {'calls': 0})['calls']"


@pytest.fixture(scope="module")
def reuse_kernel(live_kernel):
    live_kernel.run(SETUP)
    return live_kernel


def diag_on_line(client, uri: str, line: int, ename: str):
    """The cell's diagnostics when the first is `ename` on `line`, from live facts."""
    d = crane_diags(client, uri)
    ok = d and d[0].range.start.line == line and d[0].data["ename"] == ename and d[0].data["facts"] == "live"
    return d if ok else None


async def test_edits_while_nothing_ran_reuse_the_live_facts(client, reuse_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["total = reuse_df['zz'].sum()\n"])
    await attach(client, nb, reuse_kernel)
    await wait_for(lambda: diag_on_line(client, nb.cells[0], 0, "KeyError"), what="KeyError from live facts")
    calls = reuse_kernel.conn.evaluate(PROBE_CALLS)  # itself a request of another client: the next check may ask again
    for i in range(1, 6):  # each edit moves the squiggle; the probe request (names, keys, labels) stays the same
        nb.set_text(0, "\n" * i + "total = reuse_df['zz'].sum()\n")
        await wait_for(lambda i=i: diag_on_line(client, nb.cells[0], i, "KeyError"), what=f"KeyError on line {i}")
    assert reuse_kernel.conn.evaluate(PROBE_CALLS) - calls <= 1  # five checks, at most one round trip


async def test_an_in_place_mutation_by_a_run_is_seen_on_the_next_check(client, reuse_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["as_int = reuse_df['a'].astype(int)\n"])
    await attach(client, nb, reuse_kernel)
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="no NaN yet")
    nb.set_text(0, "\nas_int = reuse_df['a'].astype(int)\n")
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="still none")
    reuse_kernel.run("reuse_df.loc[0, 'a'] = float('nan')")  # same object, new content, run as the user would
    try:
        nb.set_text(0, "\n\nas_int = reuse_df['a'].astype(int)\n")
        await wait_for(lambda: diag_on_line(client, nb.cells[0], 2, "IntCastingNaNError"), what="after the run")
    finally:
        reuse_kernel.run("reuse_df.loc[0, 'a'] = 1.0")


async def test_another_clients_silent_execution_is_seen_on_the_next_edit(client, reuse_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["print(reuse_gone)\n"])
    reuse_kernel.run("reuse_gone = 1")
    await attach(client, nb, reuse_kernel)
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="defined")
    nb.set_text(0, "\nprint(reuse_gone)\n")
    await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="still defined")
    mark = len(client.kernel_status)
    # silent, no execute_input, no execution summary from the client: only the server's iopub watcher can tell.
    # It lasts long enough for the server to say "busy", which proves its watcher saw it.
    reuse_kernel.conn.private({}, code="import time as _t\n_t.sleep(0.6)\ndel reuse_gone, _t", timeout=10)
    await wait_for(lambda: any(s.state == "busy" for s in client.kernel_status[mark:]), what="busy seen")
    await wait_for(lambda: last_status(client, nb.uri).state == "idle", what="idle again")
    nb.set_text(0, "\n\nprint(reuse_gone)\n")
    await wait_for(lambda: diag_on_line(client, nb.cells[0], 2, "NameError"), what="NameError after the silent del")


async def test_an_expression_only_request_of_another_client_is_seen(client, reuse_kernel, notebook_path):
    nb = Notebook(client, notebook_path, ["reuse_df['b']\n"])
    await attach(client, nb, reuse_kernel)
    await wait_for(lambda: diag_on_line(client, nb.cells[0], 0, "KeyError"), what="KeyError: no column b")
    mark = len(client.kernel_status)
    # no code at all (IPython fires no execution event): the watcher's count of requests is what tells
    reply = reuse_kernel.conn.private({"v": "reuse_df.insert(1, 'b', 0.0) or __import__('time').sleep(0.6)"}, timeout=10)
    assert reply.user_expressions["v"]["status"] == "ok"
    try:
        await wait_for(lambda: any(s.state == "busy" for s in client.kernel_status[mark:]), what="busy seen")
        await wait_for(lambda: last_status(client, nb.uri).state == "idle", what="idle again")
        nb.set_text(0, "\nreuse_df['b']\n")
        await wait_for(lambda: crane_diags(client, nb.cells[0]) == [], what="column b found after the request")
    finally:
        reuse_kernel.run("del reuse_df['b']")


async def test_partial_facts_of_a_large_column_settle_without_an_edit(client, reuse_kernel, notebook_path):
    # 1e6 rows: reading column c exactly takes more than one probe request may read (its scan slice), so the first
    # answer is partial (`resumable`) and its one NaN, in the last row, is not seen yet. The server asks again at
    # once, each request going on where the last stopped, until the facts are exact: the squiggle comes without an
    # edit or a run. The slice is a share of each request's time budget, so a fast machine read the whole column in
    # one request (the CI run of a4d35e9: one call): the test sets the server's installed probe to read exactly one
    # chunk (65536 rows) a request, so the column takes 16 whatever the machine.
    nb = Notebook(client, notebook_path, ["total = reuse_df['zz'].sum()\n"])
    await attach(client, nb, reuse_kernel)  # (live facts: the server's probe is installed)
    await wait_for(lambda: diag_on_line(client, nb.cells[0], 0, "KeyError"), what="KeyError from live facts")
    reuse_kernel.run("__import__('sys').modules['_crane_probe'].SCAN_SLICE_SHARE = 0.0\n"
                     "import numpy as np\n"
                     "settle_df = pd.DataFrame(np.random.default_rng(0).random((1_000_000, 8)), columns=list('abcdefgh'))\n"
                     "settle_df.iloc[-1, 2] = np.nan\n")
    try:
        calls = reuse_kernel.conn.evaluate(PROBE_CALLS)
        nb.set_text(0, "as_int = settle_df['c'].astype(int)\n")
        await wait_for(lambda: diag_on_line(client, nb.cells[0], 0, "IntCastingNaNError"), what="NaN found, no edit")
        assert reuse_kernel.conn.evaluate(PROBE_CALLS) - calls >= 3  # the first answer and its follow-ups
    finally:
        reuse_kernel.run("__import__('sys').modules['_crane_probe'].SCAN_SLICE_SHARE = 0.02")
        reuse_kernel.run("del settle_df")

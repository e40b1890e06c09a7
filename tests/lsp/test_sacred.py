"""The user's kernel is sacred: a session of edits, hovers, diagnoses and checks leaves the namespace (keys
and object ids), the execution count, In/Out and the outputs unchanged, and another client of the kernel
sees no output traffic from CRANE on iopub (only busy/idle status)."""

from __future__ import annotations

from lsprotocol import types

from ..sacred import IopubWatcher
from .conftest import Kernel, Notebook, crane_diags, start_client, stop_client, wait_for

STATE = """
import numpy as np, pandas as pd
from sklearn.linear_model import LogisticRegression
df = pd.DataFrame({'age': [20, 30, None], 'city': ['a', 'b', 'c']})
X = np.zeros((3, 2))
clf = LogisticRegression()
print('setup done')
df.head()
"""

FINGERPRINT = {
    "ns": "sorted((k, id(v)) for k, v in get_ipython().user_ns.items())",
    "count": "get_ipython().execution_count",
    "In": "list(In)",
    "Out": "sorted((k, id(v)) for k, v in Out.items())",
    "events": "sorted((e, [id(c) for c in cs if type(c).__module__ != '_crane_probe' and not (type(c).__name__ == "
    "'method-wrapper' and type(c.__self__).__name__ == 'count')]) for e, cs in get_ipython().events.callbacks.items())",
}


def fingerprint(kernel: Kernel) -> dict[str, str]:
    reply = kernel.conn.private(FINGERPRINT)
    assert reply.status == "ok"
    out = {}
    for key, res in reply.user_expressions.items():
        assert res["status"] == "ok", res
        out[key] = res["data"]["text/plain"]
    return out


async def test_session_leaves_the_kernel_untouched(runtime_dir, tmp_path):
    nb_path = tmp_path / "sacred.ipynb"
    kernel = Kernel(runtime_dir, nb_path)
    try:
        kernel.run(STATE)
        before = fingerprint(kernel)
        recorder = IopubWatcher(kernel.connection_file)
        client = await start_client(env={"JUPYTER_RUNTIME_DIR": str(runtime_dir)}, mode=None)  # auto: sandboxed runs too
        try:
            nb = Notebook(
                client,
                nb_path,
                [STATE, "clf.predict(X)\n", "df['salary'].mean()\n", "print(undefined_here)\n", "y = df.age.values\n",
                 "for i in range(5):\n    print('row', i, X[i])\n    del df\n", "clf.fit(X, [0, 1, 0])\nresult = df.head()\n"],
            )
            # the sandbox ran cells (printing, deleting, fitting in its fork)
            await wait_for(
                lambda: (d := crane_diags(client, nb.cells[5])) and d[0].code == "sandbox", timeout=30, what="sandbox crash"
            )
            spec = await client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="crane.runSpeculatively", arguments=[nb.cells[5]])
            )
            assert spec is not None
            assert spec["sandbox"]["ename"] in ("UnboundLocalError", "NameError"), spec
            assert "row 0" in spec["sandbox"]["stdout"]
            await wait_for(lambda: crane_diags(client, nb.cells[1]), timeout=15, what="NotFittedError on the discovered kernel")
            await wait_for(lambda: crane_diags(client, nb.cells[2]), what="KeyError")
            for i, text in enumerate(["clf.fit(X, [0, 1, 0])\nclf.predict(X)\n", "df['city'].str.upper()\n", "X.T @ X\n"]):
                nb.set_text(1 + i, text)
            for line, col in ((0, 1), (0, 6)):
                await client.text_document_hover_async(
                    types.HoverParams(text_document=types.TextDocumentIdentifier(uri=nb.cells[4]), position=types.Position(line, col))
                )
            await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.diagnoseCell", arguments=[nb.cells[2]]))
            await client.workspace_execute_command_async(types.ExecuteCommandParams(command="crane.checkNotebook", arguments=[nb.uri]))
            await wait_for(lambda: crane_diags(client, nb.cells[1]) == [], what="re-checked after the edits")
        finally:
            await stop_client(client)
        recorder.close()
        after = fingerprint(kernel)
        assert after == before
        # the probe reused facts in the kernel (the cache was on) and counted executions with its callback
        assert kernel.conn.evaluate("__import__('sys').modules['_crane_probe'].STATS['reused']") > 0
        assert kernel.conn.evaluate("[type(c.__self__).__name__ for c in get_ipython().events.callbacks['pre_execute'] "
                                    "if type(c).__name__ == 'method-wrapper']") == ["count"]  # (C: no frame of CRANE's in a cell)
        types_seen = {m["msg_type"] for m in recorder.messages}
        assert types_seen <= {"status"}, types_seen  # no stream, display, execute_input/result, error
        assert len(recorder.messages) > 0  # the recorder did see CRANE's (silent) requests go busy/idle
    finally:
        kernel.shutdown()

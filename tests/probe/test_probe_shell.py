"""Issue 42: the probe finds the kernel's shell and the notebook's namespace without calling anything the notebook
can replace. Before, every probe call (`cache.begin`), the namespace (`entry.user_namespace`), the variable listing
and the history called `IPython.get_ipython()` looked up on the shared module at call time: a notebook that wrapped
it (`IPython.get_ipython = ...`, as some extensions and tutorials do) had its function run by each request, and one
that raised broke the history. The shell is `InteractiveShell._instance` read from the class's own `__dict__`, the
namespace the shell's own `user_ns` (an instance attribute; IPython 9's property is not called)."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.probe.collect import ProbeClient
from crane.probe.facts import ProbeRequest

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..wrapped_get_ipython import UNWRAP, WRAP

SETUP = WRAP + 'price = 4.5\nrows = [1, 2, 3]\n'


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_the_probe_calls_no_replaced_get_ipython(tmp_path, kernel_env):
    with start_kernel(tmp_path, python=kernel_python(kernel_env)) as kernel:
        conn = kernel.connection
        assert conn.run_cell(SETUP, timeout=60).status == "ok"
        probe = ProbeClient(conn)
        try:
            res = probe.run(ProbeRequest(names=["price", "rows"], user_names=50))
            again = probe.run(ProbeRequest(names=["price", "rows"]))
            history = probe.history()
        finally:
            calls = conn.evaluate("list(CALLS)")
            assert conn.run_cell(UNWRAP, timeout=60).status == "ok"
        assert calls == [], calls
        assert res.facts["price"].type == "float" and res.facts["rows"].type == "list"
        assert res.user_names is not None and {"price", "rows", "CALLS"} <= set(res.user_names)
        assert again.cached > 0  # the reuse of facts found the shell (its execution counter) too
        assert any("IPython.get_ipython = _g.get_ipython = _wrapped" in src for _, src in history)


PLANTED = '''
EQ_CALLS = []
class _Planted:
    def __hash__(self):
        return hash('price')
    def __eq__(self, other):
        EQ_CALLS.append(other)
        return False
get_ipython().user_ns_hidden[_Planted()] = None
price = 4.5
'''


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_key_planted_in_the_hidden_names_is_never_compared(tmp_path, kernel_env):
    """The variable listing leaves out IPython's hidden names (`user_ns_hidden`) by a set of its exact `str` keys:
    before, each user name was looked up in that dict, and a key planted there with a user name's hash had its
    `__eq__` run by every listing."""
    with start_kernel(tmp_path, python=kernel_python(kernel_env)) as kernel:
        conn = kernel.connection
        assert conn.run_cell(PLANTED, timeout=60).status == "ok"
        res = ProbeClient(conn).run(ProbeRequest(names=["price"], user_names=50))
        assert conn.evaluate("len(EQ_CALLS)") == 0
        assert res.user_names is not None and "price" in res.user_names and "In" not in res.user_names

"""Review M1 (round 11): the export's reads of the shell's instance dicts and trait values compare no key of the
notebook's (IPython 8 and 9, the OS transplant path).

The export reads the shell's settings and cell transformers with `dict.get` on dicts the notebook can plant keys
in: the shell's `__dict__`, traitlets' `_trait_values`, the input transformer manager's `__dict__`. A key there
whose hash is the name's runs its `__eq__` in the kernel, inside CRANE's frames, when the export asks for that name
(kernel/transformers.py: the manager's `token_transformers`; kernel/environment.py: `ast_node_interactivity`,
`compile`; kernel/export.py: `_user_ns`). Each dict is now proven to hold exact `str` keys before it is read (kernel/waiting.str_get); one that
holds another key is not read: what it holds is missed, so a crash in the copy is only "likely" (the shell's own
dict, which holds the namespace, is then read by a scan of its exact `str` keys: issue 42, h6). The planted key's
`__eq__` calls `hit` (tests/sandbox/marked_runs.HIT), which records only with CRANE's kernel-side code on the stack.
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .marked_runs import HIT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = r"""
import sys, types
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: every run is a copy
""" + HIT + r"""
class _CraneM1Key:
    def __init__(self, name):
        self.name = name
    def __hash__(self):
        return hash(self.name)
    def __eq__(self, other):
        hit(self.name)
        return False
def _crane_m1_plant(d, name):
    key = _CraneM1Key(name)
    had = name in d
    v = d.pop(name, None)
    d[key] = None  # (before the name's own entry: a lookup of the name meets it first)
    if had:
        d[name] = v
    return key
"""

# where the key is planted (an expression for the dict, in the kernel), and the name whose hash it takes
PLANTED = {
    "manager": ("get_ipython().input_transformer_manager.__dict__", "token_transformers"),
    "trait-values": ("get_ipython()._trait_values", "ast_node_interactivity"),
}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp(f"m1-keys-{request.param}"), python=kernel_python(request.param))
    c = k.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    yield c
    k.shutdown()


@pytest.mark.parametrize("where", list(PLANTED))
def test_a_key_planted_in_a_shell_dict_is_never_compared(conn, where):
    expr, name = PLANTED[where]
    assert conn.run_cell(f"_crane_m1_key = _crane_m1_plant({expr}, {name!r}); HITS.clear()").status == "ok"
    try:
        v = transplant(conn, "print(undefined_m1)", 60.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell(f"del ({expr})[_crane_m1_key]; del _crane_m1_key").status == "ok"
    assert hits == [], hits  # (before: the key's __eq__ ran in the export)
    # what that dict holds was not read: missed, so the copy's crash is only likely
    assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", False), (v.reason, v)
    v = transplant(conn, "print(undefined_m1)", 60.0)  # the key taken back: certain again
    assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", True), (v.reason, v)


@pytest.mark.parametrize("name", ["_user_ns", "user_ns", "compile"])
def test_a_key_planted_beside_the_shell_s_namespace_makes_the_copy_likely(conn, name):
    """The namespace itself is read from the shell's instance dict (`_user_ns`/`user_ns`), as its compiler is. A key
    there that is not an exact `str` (a notebook can plant one by accident) no longer switches the copy off (b1e00bf
    refused it: `unavailable`): the namespace is read by a scan comparing only exact `str` keys (kernel/waiting.
    str_scan), the shell's settings read from that dict are missed, so the copy's crash is only likely, and the
    key's `__eq__` never runs (issue 42, h6)."""
    expr = "get_ipython().__dict__"
    assert conn.run_cell(f"_crane_m1_key = _crane_m1_plant({expr}, {name!r}); HITS.clear()").status == "ok"
    try:
        v = transplant(conn, "print(undefined_m1)", 60.0)
        w = transplant(conn, "print(len(HITS))", 60.0)  # (a name of the kernel's namespace, copied)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell(f"del ({expr})[_crane_m1_key]; del _crane_m1_key").status == "ok"
    assert hits == [], hits  # (before: the key's __eq__ ran in the export)
    assert (v.verdict, v.ename, v.certain) == ("crash", "NameError", False), (v.reason, v)
    assert (w.verdict, w.stdout) == ("no-crash", "0\n"), (w.reason, w)

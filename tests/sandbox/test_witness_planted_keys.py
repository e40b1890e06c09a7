"""Round 16, F1 (issue 42): a key the notebook plants in a library class's own dict AFTER an export kept its proof's
answer (kernel/witness.py) had its `__eq__` run in the kernel by the next export's witness check, which read the
recorded owners with their dict's `get` (a class reached only through a library module's globals, as
`pd.CategoricalDtype` is from a Series' pickling, is not proven again before). Now the check reads an owner only
while its keys are all exact strings, else the answer is dropped and the walk, which proves what it reads, runs
again. Transplant and portable, one-shot and session, IPython 8 and 9. (The mechanism, key by key:
test_witness_check.py.)"""

from __future__ import annotations

import sys

import pytest

from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from .copy_sessions import copy_path_kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the copy paths' OS layers are Linux's")

SETUP = r"""
import gc, os
import pandas as pd
ser = pd.Series([1, 2])
HITS = []
class _Key:
    def __init__(self, name):
        self.name = name
    def __hash__(self):
        return hash(self.name)
    def __eq__(self, other):
        HITS.append((self.name, os.getpid()))
        return False
def plant(cls, names=('__init__', '__new__', '__call__')):
    d = gc.get_referents(cls.__dict__)[0]
    for name in names:
        d[_Key(name)] = None
def unplant(cls):
    d = gc.get_referents(cls.__dict__)[0]
    for k in [k for k in d if type(k) is _Key]:
        del d[k]
"""
CELL = "print(ser.sum())"
PORTABLE = SandboxOptions(confinement="portable")


@pytest.mark.parametrize("path", ["transplant", "portable", "portable session"])
def test_a_key_planted_after_the_answer_was_kept_never_runs_in_the_kernel(env_conn, path):
    conn = env_conn
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    kind = path.split()[0]

    def verdict():
        if path.endswith("session"):
            with open_session(conn, budget_s=60.0, sandbox=PORTABLE) as sb:
                return sb.run(CELL)
        return speculate(conn, CELL, 60.0, sandbox=PORTABLE if kind == "portable" else None)

    with copy_path_kernel(conn, kind):
        try:
            first = verdict()  # (its proof's answer kept, with its witness)
            assert first.verdict == "no-crash", first
            assert conn.run_cell("plant(pd.CategoricalDtype)\nHITS.clear()", timeout=60).status == "ok"
            again = verdict()
            hits = conn.evaluate("HITS", timeout=30)
        finally:
            assert conn.run_cell("unplant(pd.CategoricalDtype)", timeout=60).status == "ok"
    assert hits == [], hits
    assert again.verdict in ("no-crash", "unavailable"), again  # (the walk again: it proves what it reads)

"""Which copied sets of strings a cell reads where their iteration order can show (sandbox/set_order.py)."""

from __future__ import annotations

import pytest

from crane.sandbox.set_order import built_set_read, ordered_set_reads
from crane.sandbox.transplant import state_doubt


@pytest.mark.parametrize("source", [
    "'a' in cols", "x = 'b' not in cols", "n = len(cols)", "s = sorted(cols)", "assert cols == {'a', 'b'}",
    "if cols:\n    pass", "ok = not cols", "print(len(cols - {'target'}))", "m = max(cols)",
    "assert cols.issubset(other)", "cols.add('c')", "u = set(cols) | other", "k = cols.union(other) == other",
    "y = 1",
])
def test_order_free_reads(source):
    assert ordered_set_reads(source, ["cols"]) == []


@pytest.mark.parametrize("source", [
    "for c in cols:\n    print(c)", "X = df[list(cols)]", "print(cols)", "f'{cols}'", "first = next(iter(cols))",
    "model.fit(df[list(cols - {'target'})], y)", "t = tuple(cols.difference({'a'}))", "cols.pop()",
    "pd.DataFrame(columns=cols)", "extra = cols - {'target'}",  # (a set under another name: not followed) "%time list(cols)", "[c.upper() for c in cols]",
])
def test_reads_where_the_order_shows(source):
    assert ordered_set_reads(source, ["cols"]) == ["cols"]


def test_state_doubt():
    assert state_doubt("list(cols)", ["str_set:cols"]) is not None
    assert state_doubt("len(cols)", ["str_set:cols"]) is None
    assert state_doubt("list(other)", ["str_set:cols"]) is None
    assert state_doubt("b = hash(u) % 10", ["hash_differs"]) is not None
    assert state_doubt("b = hash(u) % 10", []) is None
    assert state_doubt("x = 1", ["hash_differs", "str_set:cols"]) is None


@pytest.mark.parametrize("source, shows", [
    ("cols = list(set(df.columns) - {'y'})", True), ("print({'a', 'b'})", True),
    ("for w in {x for x in ws}:\n    print(w)", True), ("ok = 'a' in {'a', 'b'}", False), ("n = len(set(x))", False),
    ("s = sorted(set(w))", False), ("same = set(a) == set(b)", False), ("%time list(set(x))", False),
])
def test_sets_the_cell_builds(source, shows):
    assert built_set_read(source) is shows

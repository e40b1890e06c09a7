"""The runtime-facts table of hovers and diagnoses (crane.lsp.facts_markdown) and the model's facts text
(crane.llm.facts_text) show what a DataFrame's columns hold: a few values of text columns, the range of
numeric ones — from a real kernel's probe facts."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.llm.facts_text import column_text
from crane.lsp.facts_markdown import column_values, facts_markdown
from crane.probe.collect import ProbeClient
from crane.probe.facts import ColumnFacts, ProbeRequest

from ..probe.no_time_cap import NO_TIME_CAP

SETUP = """
import numpy as np, pandas as pd
names = ['a|b', 'Braund, Mr. Owen', 'Cumings, Mrs. John', 'Heikkinen, Miss', 'Futrelle, Mrs. J', 'Allen, Mr. W',
         'Moran, Mr. James']
df = pd.DataFrame({
    'name': names,
    'sex': ['male', 'female', 'female', 'female', 'male', 'male', 'male'],
    'fare': [7.25, 71.2833, 7.925, 53.1, 8.05, np.nan, 512.3292],
    'pclass': [3, 1, 3, 1, 3, 3, 1],
    'price': ['1', '2.5', '3,000', '4', '5', '6', '7'],
    'code': ['1', '2', '3', '4', '5', '6', '7'],
    'when': pd.date_range('2021-01-01', periods=7),
})
"""


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp("facts-md"))
    try:
        res = kernel.connection.run_cell(SETUP, timeout=120)
        assert res.status == "ok", res.evalue
        yield ProbeClient(kernel.connection).run(ProbeRequest(time_budget_ms=NO_TIME_CAP, names=["df"])).facts["df"]
    finally:
        kernel.shutdown()


def _row(table: str, column: str) -> str:
    [row] = [ln for ln in table.splitlines() if ln.startswith(f"| `{column}` |")]
    return row


def test_table_shows_values_of_text_columns_and_ranges_of_numeric_ones(facts):
    md = facts_markdown(facts)
    assert "numbers: none" not in md
    assert _row(md, "sex").endswith("| binary: `'female', 'male'` |")
    name = _row(md, "name")
    assert name.endswith("| categorical: e.g. `'a\\|b', 'Braund, Mr. Owen', 'Cumings, Mrs. John', …`, 7 unique |")
    assert name.count(" | ") == 3  # the '|' inside a value is escaped: it does not split the row
    assert _row(md, "fare").endswith(": `7.25 … 512.3`, 6 unique |")  # the range, 4 significant digits
    assert "| 1 |" in _row(md, "fare")  # the NaN count
    assert _row(md, "pclass").endswith("| binary: `1, 3` |")
    assert "not all numbers: `'3,000'`" in _row(md, "price")
    assert "numbers as text" in _row(md, "code")
    assert "datetime: `2021-01-01 00:00:00 … 2021-01-07 00:00:00`" in _row(md, "when")


def test_model_text_carries_a_few_values_too(facts):
    cols = {c.name: c for c in facts.columns}
    assert column_text(cols["name"]) == (
        "name:object(7 uniq, e.g. 'a|b','Braund, Mr. Owen','Cumings, Mrs. John')")
    assert column_text(cols["fare"]).startswith("fare:float64[7.25..512.3] NaN=1")
    assert column_text(cols["sex"]) == "sex:object{female,male}"


def test_values_cell_without_counts_or_values():
    assert column_values(ColumnFacts(name="x", dtype="object", kind="other")) == "other"
    unhashable = ColumnFacts(name="x", dtype="object", kind="other", example_values=["[1, 2]", "[3]"])
    assert column_values(unhashable) == "other: e.g. `'[1, 2]', '[3]', …`"
    sampled = ColumnFacts(name="x", dtype="float64", kind="continuous", value_range=[0.5, 2], sampled=True)
    assert column_values(sampled) == "continuous: `0.5 … 2` (sample)"
    assert column_values(ColumnFacts(name="x", dtype="float64", kind="empty")) == "empty"

"""Rules that use a Series' name and an index's level names (real kernel, real probe, whole predictor; every
crash is run for real and must raise the predicted message, every clean twin must run clean):
`df.join(series)` needs a named Series whose name the frame lacks; `merge(on=k)` and seaborn variables may
name an index level instead of a column, whatever the index type."""

from __future__ import annotations

from ..library_versions import kernel_library
from .test_lib_sklearn import check

BASE = """
import numpy as np, pandas as pd
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import seaborn as sns
sales = pd.DataFrame({'shop': ['a', 'b', 'a', 'c'], 'price': [1.0, 2.0, 3.0, 4.0], 'qty': [1, 2, 3, 4]})
price = pd.Series([9.0, 8.0, 7.0, 6.0], name='price')
discount = pd.Series([0.1, 0.2, 0.0, 0.5], name='discount')
anonymous = pd.Series([1, 2, 3, 4])
big = sales[sales['qty'] > 1]
by_shop = pd.DataFrame({'city': ['X', 'Y', 'Z']}, index=pd.Index(['a', 'b', 'c'], name='shop'))
ranged = pd.DataFrame({'city': ['X', 'Y']}, index=pd.RangeIndex(2, name='qty'))
"""


def test_join_series_whose_name_overlaps(kernel):
    first, run = check(kernel, BASE, "out = sales.join(price)", "ValueError", "pandas-merge-join")
    assert first.message == run.evalue == "columns overlap but no suffix specified: Index(['price'], dtype='object')"


def test_join_column_of_another_frame_keeps_its_name(kernel):
    setup = BASE + "other = pd.DataFrame({'qty': [5, 6, 7, 8]})"
    first, run = check(kernel, setup, "out = sales.join(other['qty'])", "ValueError", "pandas-merge-join")
    assert first.message == run.evalue


def test_join_unnamed_series(kernel):
    first, run = check(kernel, BASE, "out = sales.join(anonymous)", "ValueError", "pandas-merge-join")
    assert first.message == run.evalue == "Other Series must have a name"


def test_join_series_clean(kernel):
    check(kernel, BASE, "out = sales.join(discount)\nout2 = sales.join(price, rsuffix='_new')")


def test_merge_on_an_index_level_name_is_fine(kernel):
    check(kernel, BASE, "m = sales.merge(by_shop, on='shop')\nm2 = pd.merge(ranged, sales, on='qty')")


def test_merge_key_missing_with_an_unnamed_non_range_index(kernel):
    first, run = check(kernel, BASE, "m = big.merge(by_shop, on='city')", "KeyError", "pandas-merge-join")
    assert first.message == "'city'" and run.evalue == "'city'"


def test_seaborn_variable_naming_an_index_level_is_fine(kernel):
    check(kernel, BASE, "ax = sns.scatterplot(data=by_shop, x='shop', y='city')\nplt.close('all')")


def test_seaborn_unknown_variable_with_a_filtered_index(kernel):
    first, run = check(kernel, BASE, "ax = sns.scatterplot(data=big, x='shop', y='cost')", "ValueError", "plot-args")
    assert first.message == run.evalue == (  # seaborn 0.13 words it anew (seaborn._core.data.PlotData)
        "Could not interpret value `cost` for `y`. An entry with this name does not appear in `data`."
        if kernel_library("seaborn") >= (0, 13) else "Could not interpret value `cost` for parameter `y`")


def test_seaborn_categorical_variable_naming_an_index_level(kernel):
    # seaborn 0.12's categorical functions look only at columns; from 0.13 they take index level names too
    target = "ax = sns.countplot(data=by_shop, x='shop')\nplt.close('all')"
    if kernel_library("seaborn") >= (0, 13):
        check(kernel, BASE, target)
    else:
        first, run = check(kernel, BASE, target, "ValueError", "plot-args")
        assert first.message == run.evalue == "Could not interpret input 'shop'"

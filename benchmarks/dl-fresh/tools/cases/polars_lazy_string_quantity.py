ID = "polars_lazy_string_quantity"
LIBRARY = "polars"
ROOT_CAUSE = "data confusion"
CRASH_TYPE = "arithmetic on a String column in a lazy query"
ENAME = "InvalidOperationError"
SOURCE = ("authored notebook modelled on polars users' 'arithmetic on string and numeric not allowed' reports "
          "where a numeric column is read as String because of placeholder text; data synthetic (make_data.py)")
DIAGNOSIS = """The quantity column holds a few 'n/a' placeholders, so pl.scan_csv infers it as String. The lazy
query built in history cell 3 multiplies unit_price by quantity; nothing runs until the target collects it, and
then polars raises InvalidOperationError (arithmetic on dtypes f64 and str is not allowed). The fix casts quantity
with cast(pl.Int64, strict=False) in the lazy query."""
FIX = "history cell 3: pl.col('quantity').cast(pl.Int64, strict=False)"
MAKE_DATA = r'''
"""Synthetic order lines: 3000 rows, product, region, unit price, quantity with 1% 'n/a'."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(91)
os.makedirs("data", exist_ok=True)
n = 3000
qty = rng.integers(1, 20, n).astype(object)
qty[rng.choice(n, 30, replace=False)] = "n/a"
pd.DataFrame({"order_id": np.arange(n), "product": rng.choice(list("ABCDEFGH"), n),
              "region": rng.choice(["north", "south", "east", "west"], n),
              "unit_price": rng.uniform(2, 90, n).round(2), "quantity": qty}).to_csv("data/orders.csv", index=False)
'''
CELLS = [
    md("# Revenue by region with a lazy polars query"),
    code(1, """
import polars as pl
"""),
    code(2, """
orders = pl.scan_csv('data/orders.csv')
orders.collect_schema()
"""),
    code(3, {"buggy": """
revenue = (orders
           .with_columns(revenue=pl.col('unit_price') * pl.col('quantity'))
           .group_by('region')
           .agg(pl.col('revenue').sum(), pl.len().alias('lines'))
           .sort('revenue', descending=True))
""", "fixed": """
revenue = (orders
           .with_columns(revenue=pl.col('unit_price') * pl.col('quantity').cast(pl.Int64, strict=False))
           .group_by('region')
           .agg(pl.col('revenue').sum(), pl.len().alias('lines'))
           .sort('revenue', descending=True))
"""}),
    target("""
result = revenue.collect()
print(result)
"""),
]

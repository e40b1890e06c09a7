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

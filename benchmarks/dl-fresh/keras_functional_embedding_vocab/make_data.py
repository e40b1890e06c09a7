"""Synthetic weekly sales: 500 rows, store id 1..50 (every id present), two numeric features, sales."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(51)
os.makedirs("data", exist_ok=True)
n = 500
store = np.concatenate([np.arange(1, 51), rng.integers(1, 51, n - 50)])
rng.shuffle(store)
temp = rng.normal(15, 8, n)
promo = rng.integers(0, 2, n)
sales = 100 + store * 2 + temp * 1.5 + promo * 30 + rng.normal(0, 5, n)
pd.DataFrame({"store": store, "temp": temp.round(2), "promo": promo, "sales": sales.round(2)}).to_csv(
    "data/sales.csv", index=False)

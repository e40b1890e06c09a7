"""Synthetic tick data: 2000 trades, int64 nanosecond timestamps in 2024, prices as a random walk."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(21)
os.makedirs("data", exist_ok=True)
n = 2000
ts = 1_704_067_200_000_000_000 + np.cumsum(rng.integers(1_000_000, 900_000_000, n))
price = 100 + np.cumsum(rng.normal(0, 0.05, n))
pd.DataFrame({"ts_ns": ts, "price": price.round(4), "size": rng.integers(1, 500, n)}).to_csv(
    "data/ticks.csv", index=False)

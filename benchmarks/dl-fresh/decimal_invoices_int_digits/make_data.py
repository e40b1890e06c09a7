"""Synthetic invoices: 600 rows, 8-digit invoice numbers, amounts with cents."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(121)
os.makedirs("data", exist_ok=True)
n = 600
pd.DataFrame({"invoice": rng.integers(10_000_000, 99_999_999, n),
              "amount": [f"{v:.2f}" for v in rng.uniform(5, 5000, n)],
              "currency": "EUR"}).to_csv("data/invoices.csv", index=False)

"""Synthetic house-price regression data: 400 rows, 6 numeric features, price linear in them plus noise."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(11)
os.makedirs("data", exist_ok=True)
n = 400
X = rng.normal(size=(n, 6))
price = X @ np.array([3.0, -1.5, 0.7, 2.2, 0.0, 1.1]) + 50 + rng.normal(0, 0.5, n)
cols = {f"f{i}": X[:, i].round(4) for i in range(6)}
cols["price"] = price.round(3)
pd.DataFrame(cols).to_csv("data/houses.csv", index=False)

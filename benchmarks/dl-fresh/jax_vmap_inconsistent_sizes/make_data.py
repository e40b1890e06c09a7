"""Synthetic binary classification data: 300 rows, 4 features, 12 labels missing (NaN)."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(31)
os.makedirs("data", exist_ok=True)
n = 300
X = rng.normal(size=(n, 4))
label = (X[:, 0] - X[:, 2] + rng.normal(0, 0.3, n) > 0).astype(float)
label[rng.choice(n, 12, replace=False)] = np.nan
df = pd.DataFrame({f"x{i}": X[:, i].round(4) for i in range(4)})
df["label"] = label
df.to_csv("data/points.csv", index=False)

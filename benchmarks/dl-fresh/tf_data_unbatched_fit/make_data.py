"""Synthetic wine-quality-like table: 400 rows, 8 physico-chemical features, quality score 3..8."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(71)
os.makedirs("data", exist_ok=True)
n = 400
X = rng.normal(loc=[7, 0.5, 0.3, 2.5, 0.08, 15, 46, 10], scale=[1.5, 0.2, 0.2, 1.2, 0.03, 9, 30, 1], size=(n, 8))
q = np.clip(np.round(5.6 + 0.4 * (X[:, 7] - 10) - 1.5 * (X[:, 1] - 0.5) + rng.normal(0, 0.5, n)), 3, 8)
cols = ["fixed_acidity", "volatile_acidity", "citric_acid", "residual_sugar", "chlorides",
        "free_so2", "total_so2", "alcohol"]
df = pd.DataFrame({c: X[:, i].round(4) for i, c in enumerate(cols)})
df["quality"] = q.astype(int)
df.to_csv("data/wine.csv", index=False)

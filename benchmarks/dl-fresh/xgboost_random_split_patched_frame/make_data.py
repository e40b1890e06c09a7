"""Synthetic 4-class product-defect table: 200 rows, 5 features, class c1 has 2 rows."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(101)
os.makedirs("data", exist_ok=True)
n = 200
label = rng.choice(["c0", "c2", "c3"], n)
label[[17, 143]] = "c1"
X = rng.normal(size=(n, 5)) + pd.Series(label).map({"c0": 0, "c1": 3, "c2": 1, "c3": 2}).values[:, None]
df = pd.DataFrame({f"m{i}": X[:, i].round(4) for i in range(5)})
df["defect"] = label
df.to_csv("data/defects.csv", index=False)

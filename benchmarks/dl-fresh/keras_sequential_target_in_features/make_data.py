"""Synthetic telecom churn table: 600 customers, 10 numeric features, churn 0/1."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(41)
os.makedirs("data", exist_ok=True)
n = 600
X = rng.normal(size=(n, 10))
churn = (X[:, 0] + 0.5 * X[:, 3] - X[:, 7] + rng.normal(0, 0.5, n) > 0.4).astype(int)
df = pd.DataFrame({"customer_id": np.arange(10000, 10000 + n)})
for i in range(10):
    df[f"feat_{i}"] = X[:, i].round(4)
df["churn"] = churn
df.to_csv("data/churn.csv", index=False)

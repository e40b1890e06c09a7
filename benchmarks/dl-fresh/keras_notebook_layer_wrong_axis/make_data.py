"""Synthetic sensor readings: 480 rows, 12 channels, a 3-class machine state."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(61)
os.makedirs("data", exist_ok=True)
n = 480
state = rng.integers(0, 3, n)
X = rng.normal(size=(n, 12)) + state[:, None] * np.linspace(-0.5, 0.5, 12)
df = pd.DataFrame({f"ch{i}": X[:, i].round(4) for i in range(12)})
df["state"] = state
df.to_csv("data/sensors.csv", index=False)

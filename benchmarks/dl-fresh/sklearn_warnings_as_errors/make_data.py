"""Synthetic loan applications: 800 rows, income, debt, age, years employed, default 0/1."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(111)
os.makedirs("data", exist_ok=True)
n = 800
income = rng.normal(52000, 18000, n).clip(8000)
debt = rng.normal(15000, 9000, n).clip(0)
age = rng.integers(19, 75, n)
years = rng.integers(0, 40, n)
z = -0.00004 * income + 0.00009 * debt - 0.02 * age + rng.normal(0, 0.6, n)
pd.DataFrame({"income": income.round(0), "debt": debt.round(0), "age": age, "years_employed": years,
              "default": (z > np.median(z)).astype(int)}).to_csv("data/loans.csv", index=False)

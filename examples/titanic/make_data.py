"""Generate data/passengers.csv: a synthetic Titanic-like table (fixed seed, standard library only)."""

import csv
import random
from pathlib import Path

rng = random.Random(7)
out = Path(__file__).parent / "data" / "passengers.csv"
out.parent.mkdir(exist_ok=True)
with out.open("w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["PassengerId", "Pclass", "Sex", "Age", "Fare", "Survived"])
    for i in range(1, 401):
        pclass = rng.choice([1, 2, 3])
        sex = rng.choice(["male", "female"])
        age = "" if rng.random() < 0.15 else round(rng.uniform(1, 80), 1)
        fare = round(rng.uniform(5, 90) * (4 - pclass), 2)
        p = 0.2 + 0.5 * (sex == "female") + 0.1 * (pclass == 1)
        w.writerow([i, pclass, sex, age, fare, int(rng.random() < p)])
print(f"wrote {out}")

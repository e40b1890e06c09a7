"""Builds the multi-cell crash cases of this folder (../../shared/bench/README.md format): notebooks whose target
cell crashes because of another cell — a value made wrong or gone stale earlier — each with its real fixed
notebook (the fix a person writes, in the cell where the problem began). Written from the patterns of public
Kaggle-style notebooks (Titanic, house prices, gym crowdedness, sales, iris); data synthetic, fixed seeds.

    python benchmarks/multicell/build.py          # (re)writes every case folder next to this file
    crane bench benchmarks/multicell --fix --offline --jobs 1

A case: cells as (source, execution count or None) for the buggy and the fixed notebook; the target has none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
IMPORTS = "import pandas as pd\nimport numpy as np\n"
SK = IMPORTS + ("from sklearn.model_selection import train_test_split, cross_val_score\n"
                "from sklearn.linear_model import LogisticRegression, LinearRegression\n"
                "from sklearn.ensemble import RandomForestClassifier\n")


def titanic(n: int = 240) -> pd.DataFrame:
    rng = np.random.default_rng(43)
    sex = rng.choice(["male", "female"], n)
    return pd.DataFrame({
        "Survived": ((sex == "female") ^ (rng.random(n) < 0.2)).astype(int),
        "Pclass": rng.integers(1, 4, n), "Sex": sex, "Age": rng.integers(1, 80, n).astype(float),
        "Fare": rng.uniform(5, 250, n).round(2), "Embarked": rng.choice(["S", "C", "Q"], n, p=[0.7, 0.2, 0.1]),
    })


def sales(n: int = 120) -> pd.DataFrame:
    rng = np.random.default_rng(44)
    price = rng.uniform(5, 3000, n).round(2)
    return pd.DataFrame({"item": [f"sku{i}" for i in range(n)], "units": rng.integers(1, 6, n),
                         "price": [f"${p:,.2f}" for p in price]})


def gym(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(45)
    month = rng.integers(1, 13, n)
    temp = rng.uniform(40, 85, n).round(1)
    return pd.DataFrame({"month": month, "temperature": temp,
                         "number_people": (temp - 30 + rng.integers(0, 40, n)).astype(int)})


def houses(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(46)
    sqft = rng.integers(500, 4000, n)
    return pd.DataFrame({"sqft": sqft, "bedrooms": rng.integers(1, 6, n), "age": rng.integers(0, 90, n),
                         "price": (sqft * 150 + rng.normal(0, 20000, n)).round(0)})


def shop() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(47)
    customers = pd.DataFrame({"customer_id": range(1, 41), "city": rng.choice(["Lyon", "Paris", "Nice"], 40)})
    orders = pd.DataFrame({"order_id": range(100), "customer_id": rng.integers(1, 41, 100),
                           "city": rng.choice(["Lyon", "Paris", "Nice"], 100), "amount": rng.uniform(5, 90, 100).round(2)})
    return {"customers.csv": customers, "orders.csv": orders}


def iris_like(n: int = 150) -> pd.DataFrame:
    rng = np.random.default_rng(48)
    species = np.repeat(["setosa", "versicolor", "virginica"], n // 3)
    base = np.repeat([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]], n // 3, axis=0)
    x = base + rng.normal(0, 0.3, base.shape)
    df = pd.DataFrame(x.round(2), columns=["sepal_length", "sepal_width", "petal_length", "petal_width"])
    df["species"] = species
    return df


CASES: list[dict] = [
    {"id": "stale_feature_list", "library": "sklearn", "root_cause": "NB specific",
     "diagnosis": "the feature list was built before get_dummies replaced 'Sex' and 'Embarked': df[features] "
                  "raises KeyError; build it again after the encoding",
     "data": {"train.csv": titanic()}, "ename": "KeyError",
     "buggy": [(SK, 1), ("df = pd.read_csv('data/train.csv')\n", 2),
               ("features = [c for c in df.columns if c != 'Survived']\n", 3),
               ("df = pd.get_dummies(df, columns=['Sex', 'Embarked'])\n", 4),
               ("X = df[features]\nmodel = LogisticRegression(max_iter=1000).fit(X, df['Survived'])\n"
                "print(round(model.score(X, df['Survived']), 2))\n", None)],
     "fixed": [(SK, 1), ("df = pd.read_csv('data/train.csv')\n", 2),
               ("features = [c for c in df.columns if c != 'Survived']\n", 5),
               ("df = pd.get_dummies(df, columns=['Sex', 'Embarked'])\n", 4), None]},
    {"id": "price_text", "library": "pandas", "root_cause": "data confusion",
     "diagnosis": "price is read as text ('$1,234.50'): the mean of a selection of it fails; convert it where the "
                  "frame is loaded",
     "data": {"sales.csv": sales()}, "ename": "TypeError",
     "buggy": [(IMPORTS, 1), ("sales = pd.read_csv('data/sales.csv')\nsales.head()\n", 2),
               ("bulk = sales[sales['units'] > 2]\n", 3), ("print(bulk['price'].mean())\n", None)],
     "fixed": [(IMPORTS, 1), ("sales = pd.read_csv('data/sales.csv')\n"
                              "sales['price'] = sales['price'].str.replace('[$,]', '', regex=True).astype(float)\n"
                              "sales.head()\n", 2), ("bulk = sales[sales['units'] > 2]\n", 3), None]},
    {"id": "split_values", "library": "pandas", "root_cause": "API misuse",
     "diagnosis": "train_test_split got X.values: X_train is an ndarray without .head(); split the DataFrame",
     "data": {"houses.csv": houses()}, "ename": "AttributeError",
     "buggy": [(SK, 1), ("houses = pd.read_csv('data/houses.csv')\n", 2),
               ("X = houses.drop(columns='price')\ny = houses['price']\n", 3),
               ("X_train, X_test, y_train, y_test = train_test_split(X.values, y.values, test_size=0.25, "
                "random_state=0)\n", 4), ("X_train.head()\n", None)],
     "fixed": [(SK, 1), ("houses = pd.read_csv('data/houses.csv')\n", 2),
               ("X = houses.drop(columns='price')\ny = houses['price']\n", 3),
               ("X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)\n", 4),
               None]},
    {"id": "month_as_text", "library": "sklearn", "root_cause": "data confusion",
     "diagnosis": "month is an integer column: df['month'] == '8' selects nothing, and the regression gets 0 "
                  "samples",
     "data": {"gym.csv": gym()}, "ename": "ValueError",
     "buggy": [(SK, 1), ("df = pd.read_csv('data/gym.csv')\n", 2),
               ("august = df[df['month'] == '8']\nx = august[['temperature']].values\ny = august['number_people']"
                ".values\n", 3), ("lr = LinearRegression().fit(x, y)\nprint(lr.coef_.round(1))\n", None)],
     "fixed": [(SK, 1), ("df = pd.read_csv('data/gym.csv')\n", 2),
               ("august = df[df['month'] == 8]\nx = august[['temperature']].values\ny = august['number_people']"
                ".values\n", 3), None]},
    {"id": "drop_twice", "library": "pandas", "root_cause": "NB specific",
     "diagnosis": "the clean-up cell already ran once (it dropped 'age' in place); running it again raises "
                  "KeyError",
     "data": {"houses.csv": houses()}, "ename": "KeyError",
     "buggy": [(IMPORTS, 1), ("houses = pd.read_csv('data/houses.csv')\n", 2),
               ("numeric = list(houses.columns)\n", 3),
               ("houses.drop(columns=['age'], inplace=True)\nnumeric.remove('age')\n", 4),
               ("houses.drop(columns=['age'], inplace=True)\nnumeric.remove('age')\n", None)],
     "fixed": [(IMPORTS, 1), ("houses = pd.read_csv('data/houses.csv')\n", 2),
               ("numeric = list(houses.columns)\n", 3), None, ("houses.drop(columns=['age'], inplace=True)\n"
                                                                "numeric.remove('age')\n", None)]},
    {"id": "merge_city", "library": "pandas", "root_cause": "data confusion",
     "diagnosis": "both tables have 'city': the merge renamed it to city_x / city_y, so merged['city'] raises "
                  "KeyError",
     "data": shop(), "ename": "KeyError",
     "buggy": [(IMPORTS, 1), ("customers = pd.read_csv('data/customers.csv')\norders = pd.read_csv('data/orders.csv')"
                              "\n", 2), ("merged = orders.merge(customers, on='customer_id')\n", 3),
               ("print(merged.groupby('city')['amount'].sum().round(2))\n", None)],
     "fixed": [(IMPORTS, 1), ("customers = pd.read_csv('data/customers.csv')\norders = pd.read_csv('data/orders.csv')"
                              "\n", 2), ("merged = orders.merge(customers, on='customer_id', suffixes=('', '_customer'))"
                                         "\n", 3), None]},
    {"id": "loop_overwrites_model", "library": "sklearn", "root_cause": "implementation error",
     "diagnosis": "the comparison loop's variable `model` replaced the fitted random forest; the last model has no "
                  "feature_importances_",
     "data": {"train.csv": titanic()}, "ename": "AttributeError",
     "buggy": [(SK, 1), ("df = pd.read_csv('data/train.csv')\nX = df[['Pclass', 'Age', 'Fare']]\ny = df['Survived']\n",
                         2), ("model = RandomForestClassifier(n_estimators=50, random_state=0)\nmodel.fit(X, y)\n", 3),
               ("models = {'logreg': LogisticRegression(max_iter=1000)}\nfor name, model in models.items():\n"
                "    print(name, cross_val_score(model, X, y, cv=3).mean().round(2))\n    model.fit(X, y)\n", 4),
               ("print(pd.Series(model.feature_importances_, index=X.columns).round(2))\n", None)],
     "fixed": [(SK, 1), ("df = pd.read_csv('data/train.csv')\nX = df[['Pclass', 'Age', 'Fare']]\ny = df['Survived']\n",
                         2), ("model = RandomForestClassifier(n_estimators=50, random_state=0)\nmodel.fit(X, y)\n", 3),
               ("models = {'logreg': LogisticRegression(max_iter=1000)}\nfor name, clf in models.items():\n"
                "    print(name, cross_val_score(clf, X, y, cv=3).mean().round(2))\n    clf.fit(X, y)\n", 4), None]},
    {"id": "dummies_missed_column", "library": "sklearn", "root_cause": "data confusion",
     "diagnosis": "get_dummies encoded 'Sex' only: 'Embarked' is still text and the model cannot convert 'S'",
     "data": {"train.csv": titanic()}, "ename": "ValueError",
     "buggy": [(SK, 1), ("df = pd.read_csv('data/train.csv')\n", 2),
               ("df = pd.get_dummies(df, columns=['Sex'])\n", 3),
               ("X = df.drop(columns='Survived')\ny = df['Survived']\n", 4),
               ("clf = LogisticRegression(max_iter=1000).fit(X, y)\nprint(round(clf.score(X, y), 2))\n", None)],
     "fixed": [(SK, 1), ("df = pd.read_csv('data/train.csv')\n", 2),
               ("df = pd.get_dummies(df, columns=['Sex', 'Embarked'])\n", 3),
               ("X = df.drop(columns='Survived')\ny = df['Survived']\n", 4), None]},
    {"id": "fit_only_in_cv", "library": "sklearn", "root_cause": "ML model confusion",
     "diagnosis": "cross_val_score fits copies of the classifier: clf itself was never fitted",
     "data": {"iris.csv": iris_like()}, "ename": "NotFittedError",
     "buggy": [(SK, 1), ("iris = pd.read_csv('data/iris.csv')\nX = iris.drop(columns='species')\ny = iris['species']\n"
                         "X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=1)\n", 2),
               ("clf = LogisticRegression(max_iter=1000)\nprint(cross_val_score(clf, X_train, y_train, cv=5).mean()"
                ".round(2))\n", 3), ("pred = clf.predict(X_test)\nprint((pred == y_test).mean().round(2))\n", None)],
     "fixed": [(SK, 1), ("iris = pd.read_csv('data/iris.csv')\nX = iris.drop(columns='species')\ny = iris['species']\n"
                         "X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=1)\n", 2),
               ("clf = LogisticRegression(max_iter=1000)\nprint(cross_val_score(clf, X_train, y_train, cv=5).mean()"
                ".round(2))\nclf.fit(X_train, y_train)\n", 3), None]},
    {"id": "mask_other_frame", "library": "pandas", "root_cause": "implementation error",
     "diagnosis": "the mask comes from train but indexes test: 'Unalignable boolean Series'",
     "data": {"train.csv": titanic(90), "test.csv": titanic()}, "ename": "IndexingError",
     "buggy": [(IMPORTS, 1), ("train = pd.read_csv('data/train.csv')\ntest = pd.read_csv('data/test.csv')\n", 2),
               ("adult = train['Age'] >= 18\n", 3), ("print(len(test[adult]))\n", None)],
     "fixed": [(IMPORTS, 1), ("train = pd.read_csv('data/train.csv')\ntest = pd.read_csv('data/test.csv')\n", 2),
               ("adult = test['Age'] >= 18\n", 3), None]},
    {"id": "max_overwritten", "library": "pandas", "root_cause": "implementation error",
     "diagnosis": "an earlier cell bound `max` to a number; max(...) in the target calls that number",
     "data": {"houses.csv": houses()}, "ename": "TypeError",
     "buggy": [(IMPORTS, 1), ("houses = pd.read_csv('data/houses.csv')\n", 2),
               ("max = houses['price'].max()\nprint('most expensive', max)\n", 3),
               ("print(max(houses['bedrooms']), max(houses['sqft']))\n", None)],
     "fixed": [(IMPORTS, 1), ("houses = pd.read_csv('data/houses.csv')\n", 2),
               ("max_price = houses['price'].max()\nprint('most expensive', max_price)\n", 3), None]},
]


IMPORT_LINES = [  # in isort order; a case's import cell keeps those its code uses
    ("import numpy as np", ["np"]), ("import pandas as pd", ["pd"]),
    ("from sklearn.ensemble import RandomForestClassifier", ["RandomForestClassifier"]),
    ("from sklearn.linear_model import {}", ["LinearRegression", "LogisticRegression"]),
    ("from sklearn.model_selection import {}", ["cross_val_score", "train_test_split"]),
]


def imports_for(sources: list[str]) -> str:
    code = "\n".join(sources)
    out = []
    for line, names in IMPORT_LINES:
        used = [n for n in names if re.search(rf"\b{n}\b", code)]
        if used:
            out.append(line.format(", ".join(used)) if "{}" in line else line)
    return "\n".join(out) + "\n"


def with_imports(case: dict) -> dict:
    """The case with its first cell (the imports) cut down to what its cells use."""
    body = [c[0] for c in case["buggy"][1:]] + [c[0] for c in case["fixed"][1:] if c is not None]
    head = imports_for(body)
    out = dict(case)
    out["buggy"] = [(head, case["buggy"][0][1])] + case["buggy"][1:]
    out["fixed"] = [(head, case["fixed"][0][1])] + case["fixed"][1:]
    return out


def cell(source: str, count: int | None) -> dict:
    return {"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}


def notebook(cells: list[tuple[str, int | None]]) -> str:
    nb = {"cells": [cell(s, c) for s, c in cells],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1) + "\n"


def build(case: dict) -> None:
    folder = HERE / case["id"]
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for name, frame in case["data"].items():
        frame.to_csv(folder / "data" / name, index=False)
    buggy = case["buggy"]
    target = len(buggy)
    fixed = []
    for i, c in enumerate(case["fixed"]):
        if c is None and i == target - 1:  # the target cell, unchanged
            fixed.append(buggy[i])
        elif c is not None:
            fixed.append(c)
    fixed_target = next(i for i, (_, count) in enumerate(fixed, start=1) if count is None)
    (folder / "buggy.ipynb").write_text(notebook(buggy))
    (folder / "fixed.ipynb").write_text(notebook(fixed))
    meta = {"id": case["id"], "library": case["library"], "root_cause": case["root_cause"],
            "crash_type": case["ename"], "source": "authored for CRANE (benchmarks/multicell/build.py), after public "
            "notebook patterns; data synthetic", "diagnosis": case["diagnosis"],
            "variants": {"buggy": {"notebook": "buggy.ipynb", "target_cell": target,
                                   "expect": {"crash": True, "ename": case["ename"]}},
                         "fixed": {"notebook": "fixed.ipynb", "target_cell": fixed_target, "expect": {"crash": False}}}}
    (folder / "case.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    for c in CASES:
        build(with_imports(c))
    print(f"{len(CASES)} cases written to {HERE}")

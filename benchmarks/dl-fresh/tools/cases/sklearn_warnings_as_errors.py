ID = "sklearn_warnings_as_errors"
LIBRARY = "sklearn"
ROOT_CAUSE = "NB specific"
CRASH_TYPE = "warning turned into an exception by an earlier cell's filter"
ENAME = "ConvergenceWarning"
SOURCE = ("authored notebook modelled on notebooks that set warnings.simplefilter('error') to catch silent "
          "problems, then meet scikit-learn's ConvergenceWarning as an exception; data synthetic (make_data.py)")
DIAGNOSIS = """Cell 2 makes every warning an error (warnings.simplefilter('error')). The target fits
LogisticRegression(max_iter=25) on unscaled features (incomes in the tens of thousands): lbfgs stops before
converging and the ConvergenceWarning is raised as an exception. Without the earlier filter the cell only warns.
The fix scales the features in a pipeline and allows 500 iterations."""
FIX = "target cell: StandardScaler + LogisticRegression(max_iter=500) in a pipeline"
MAKE_DATA = r'''
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
'''
CELLS = [
    md("# Loan default: a strict notebook"),
    code(1, """
import warnings
import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.model_selection import train_test_split
"""),
    code(2, """
warnings.simplefilter('error')   # no silent surprises in this notebook
"""),
    code(3, """
loans = pd.read_csv('data/loans.csv')
X = loans.drop(columns='default')
y = loans['default']
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
"""),
    target({"buggy": """
clf = LogisticRegression(max_iter=25)
clf.fit(X_tr, y_tr)
print(clf.score(X_te, y_te))
""", "fixed": """
clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
clf.fit(X_tr, y_tr)
print(clf.score(X_te, y_te))
"""}),
]

ID = "xgboost_random_split_patched_frame"
LIBRARY = "xgboost"
ROOT_CAUSE = "data confusion"
CRASH_TYPE = "class missing from a random training split"
ENAME = "ValueError"
SOURCE = ("authored notebook modelled on XGBoost's 'Invalid classes inferred from unique values of y' error after "
          "a hand-made random split left a rare class out of training; the split is a method the notebook adds "
          "to pandas.DataFrame; data synthetic (make_data.py)")
DIAGNOSIS = """Cell 2 seeds NumPy's global generator (np.random.seed(19)), cell 3 adds DataFrame.random_split (a
method of the notebook's, drawing from np.random) and draws a few rows with df.sample (which advances the global
state). The target splits with df.random_split(0.7): with this generator state both rows of the rare class 'c1'
land in validation, so the encoded training labels are [0, 2, 3] and XGBClassifier.fit raises ValueError
(Invalid classes inferred from unique values of y). The verdict depends on the exact global RNG state and on the
method added to pandas' class. The fix encodes the labels seen in training with a LabelEncoder fitted on them."""
FIX = "target cell: LabelEncoder fitted on the training labels"
NOTES = """Risky-looking fixed twin: it calls the DataFrame method the notebook added (a copy without it raises
AttributeError)."""
MAKE_DATA = r'''
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
'''
CELLS = [
    md("# Defect type from line measurements (XGBoost)"),
    code(1, """
import numpy as np
import pandas as pd
from xgboost import XGBClassifier
from sklearn.preprocessing import LabelEncoder
"""),
    code(2, """
np.random.seed(19)
df = pd.read_csv('data/defects.csv')
df['defect'].value_counts()
"""),
    code(3, """
def random_split(self, frac):
    mask = np.random.rand(len(self)) < frac
    return self[mask], self[~mask]

pd.DataFrame.random_split = random_split
df.sample(3)
"""),
    target({"buggy": """
train, val = df.random_split(0.7)
feats = [c for c in df.columns if c.startswith('m')]
codes = {'c0': 0, 'c1': 1, 'c2': 2, 'c3': 3}
clf = XGBClassifier(n_estimators=30, max_depth=3)
clf.fit(train[feats], train['defect'].map(codes))
print((clf.predict(val[feats]) == val['defect'].map(codes)).mean())
""", "fixed": """
train, val = df.random_split(0.7)
feats = [c for c in df.columns if c.startswith('m')]
le = LabelEncoder().fit(train['defect'])
clf = XGBClassifier(n_estimators=30, max_depth=3)
clf.fit(train[feats], le.transform(train['defect']))
print((le.inverse_transform(clf.predict(val[feats])) == val['defect']).mean())
"""}),
]

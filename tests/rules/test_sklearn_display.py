"""sklearn-display: ConfusionMatrixDisplay with display_labels of another length than the matrix's classes, on a
real kernel of each environment (scikit-learn 1.2 / matplotlib 3.7 and scikit-learn 1.9 / matplotlib 3.11); every
prediction is checked against the cell's real run."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import predict_source, run_target

SETUP = """
import matplotlib
matplotlib.use('Agg')
import numpy as np, pandas as pd
from sklearn import metrics
from sklearn.metrics import confusion_matrix, ConfusionMatrixDisplay
from sklearn.linear_model import LogisticRegression
rng = np.random.RandomState(0)
X = rng.normal(size=(30, 2))
species = pd.Series(['setosa', 'versicolor', 'virginica'] * 10, name='species')
pred = np.array(['setosa', 'versicolor', 'versicolor'] * 10, dtype=object)
binary = pd.Series([0, 1] * 15)
binary_pred = np.array([0, 1, 2] * 10)
clf = LogisticRegression().fit(X, species)
cm3 = confusion_matrix(species, pred)
"""

CM = "cm = metrics.confusion_matrix(species, pred)\n"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def kernel(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("display"), python=kernel_python(request.param))
    yield k
    k.shutdown()


@pytest.mark.parametrize(
    ("target", "crashes"),
    [
        (CM + "disp = metrics.ConfusionMatrixDisplay(confusion_matrix=cm, display_labels=[False, True])\ndisp.plot()",
         True),
        (CM + "disp = metrics.ConfusionMatrixDisplay(confusion_matrix=cm, display_labels=['a', 'b', 'c'])\n"
         "disp.plot()", False),
        (CM + "ConfusionMatrixDisplay(cm, display_labels=['a', 'b', 'c', 'd']).plot()", True),
        ("ConfusionMatrixDisplay(cm3, display_labels=['a', 'b']).plot()", True),  # a live 3 x 3 matrix
        ("ConfusionMatrixDisplay(cm3).plot()", False),
        # y_true has 2 labels, y_pred a third one: the matrix is 3 x 3
        ("ConfusionMatrixDisplay(confusion_matrix(binary, binary_pred), display_labels=[0, 1]).plot()", True),
        ("ConfusionMatrixDisplay(confusion_matrix(binary, binary_pred), display_labels=[0, 1, 2]).plot()", False),
        ("ConfusionMatrixDisplay(confusion_matrix(binary, binary_pred, labels=[0, 1]), display_labels=[0, 1])"
         ".plot()", False),
        ("ConfusionMatrixDisplay.from_predictions(species, pred, display_labels=['x', 'y'])", True),
        ("ConfusionMatrixDisplay.from_predictions(species, pred, labels=['setosa', 'virginica'], "
         "display_labels=['x', 'y'])", False),
        ("ConfusionMatrixDisplay.from_estimator(clf, X, species, display_labels=['x', 'y'])", True),
        ("ConfusionMatrixDisplay.from_estimator(clf, X, species, display_labels=['x', 'y', 'z'])", False),
        # the labels set after construction: not judged, and it runs clean
        (CM + "disp = ConfusionMatrixDisplay(cm, display_labels=[0, 1])\ndisp.display_labels = None\ndisp.plot()",
         False),
    ],
)
def test_display_labels(kernel, target, crashes):
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    assert (run.status == "error") == crashes, (run.ename, run.evalue)
    if crashes:
        assert [(f.rule, f.ename) for f in findings][:1] == [("sklearn-display", "ValueError")], findings
        assert findings[0].message == run.evalue
    else:
        assert findings == [], findings

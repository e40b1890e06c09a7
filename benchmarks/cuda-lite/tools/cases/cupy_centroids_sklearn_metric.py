ID = "cupy_centroids_sklearn_metric"
LIBRARY = "cupy"
ROOT_CAUSE = "API misuse"
CRASH_TYPE = "GPU array passed to a NumPy-only API"
ENAME = "TypeError"
SOURCE = ("authored Kaggle-style notebook, modelled on CuPy speed-up notebooks that hand CuPy arrays to "
          "scikit-learn metrics ('Implicit conversion to a NumPy array is not allowed. Please use .get()', a "
          "frequent CuPy question); data: scikit-learn's bundled 8x8 digits")
DIAGNOSIS = """A nearest-centroid classifier is computed with CuPy on the GPU; pred is a cupy.ndarray, and
scikit-learn's accuracy_score converts its inputs with NumPy, which CuPy refuses: TypeError (Implicit conversion
to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly.). The fix (the target
cell) copies the predictions to the host with .get()."""
FIX = "target cell: pred.get()"
CELLS = [
    md("# Digits: nearest centroids on the GPU with CuPy"),
    code(1, """
import numpy as np
import cupy as cp
from sklearn.datasets import load_digits
from sklearn.metrics import accuracy_score, confusion_matrix
"""),
    code(2, """
X, y = load_digits(return_X_y=True)
rng = np.random.default_rng(0)
order = rng.permutation(len(X))
train, test = order[:1400], order[1400:]
X_gpu = cp.asarray(X, dtype=cp.float32) / 16.0
y_gpu = cp.asarray(y)
y_test = y[test]
X_gpu.shape, X_gpu.device
"""),
    code(3, """
Xtr, ytr = X_gpu[train], y_gpu[train]
centroids = cp.stack([Xtr[ytr == k].mean(axis=0) for k in range(10)])
dist = ((X_gpu[test][:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
pred = dist.argmin(axis=1)
pred[:10]
"""),
    target({"buggy": """
acc = accuracy_score(y_test, pred)
print(f'nearest-centroid accuracy: {acc:.3f}')
confusion_matrix(y_test, pred)
""", "fixed": """
acc = accuracy_score(y_test, pred.get())
print(f'nearest-centroid accuracy: {acc:.3f}')
confusion_matrix(y_test, pred.get())
"""}),
]

ID = "jax_vmap_inconsistent_sizes"
LIBRARY = "jax"
ROOT_CAUSE = "data confusion"
CRASH_TYPE = "vmap over arrays of different leading sizes"
ENAME = "ValueError"
SOURCE = ("authored notebook modelled on per-example gradient tutorials (jax.vmap(jax.grad(...))) where the "
          "labels were filtered separately from the features; data synthetic (make_data.py)")
DIAGNOSIS = """Rows with a missing label are dropped from y (history cell 3) but not from X, so X has 300 rows and
y 288. The target vmaps the per-example gradient over both with in_axes=(None, 0, 0) and JAX raises ValueError
(vmap got inconsistent sizes for array axes to be mapped). The fix drops the same rows from both."""
FIX = "history cell 3: the NaN rows dropped from the frame before X and y are taken"
MAKE_DATA = r'''
"""Synthetic binary classification data: 300 rows, 4 features, 12 labels missing (NaN)."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(31)
os.makedirs("data", exist_ok=True)
n = 300
X = rng.normal(size=(n, 4))
label = (X[:, 0] - X[:, 2] + rng.normal(0, 0.3, n) > 0).astype(float)
label[rng.choice(n, 12, replace=False)] = np.nan
df = pd.DataFrame({f"x{i}": X[:, i].round(4) for i in range(4)})
df["label"] = label
df.to_csv("data/points.csv", index=False)
'''
CELLS = [
    md("# Per-example gradient norms with jax.vmap"),
    code(1, """
import numpy as np
import pandas as pd
import jax
import jax.numpy as jnp
"""),
    code(2, """
df = pd.read_csv('data/points.csv')
df['label'].isna().sum()
"""),
    code(3, {"buggy": """
X = jnp.asarray(df[['x0', 'x1', 'x2', 'x3']].values, dtype=jnp.float32)
y = jnp.asarray(df['label'].dropna().values, dtype=jnp.float32)
""", "fixed": """
clean = df.dropna(subset=['label'])
X = jnp.asarray(clean[['x0', 'x1', 'x2', 'x3']].values, dtype=jnp.float32)
y = jnp.asarray(clean['label'].values, dtype=jnp.float32)
"""}),
    code(4, """
def loss(w, x, t):
    p = jax.nn.sigmoid(x @ w)
    return -(t * jnp.log(p + 1e-7) + (1 - t) * jnp.log(1 - p + 1e-7))

w = jnp.zeros(4)
"""),
    target("""
per_example = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(w, X, y)
norms = jnp.linalg.norm(per_example, axis=1)
print(per_example.shape, float(norms.max()))
"""),
]

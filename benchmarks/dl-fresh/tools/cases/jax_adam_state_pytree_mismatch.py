ID = "jax_adam_state_pytree_mismatch"
LIBRARY = "jax"
ROOT_CAUSE = "implementation error"
CRASH_TYPE = "pytree structure mismatch in tree_map"
ENAME = "ValueError"
SOURCE = ("authored notebook modelled on hand-written Adam optimizers in JAX tutorials where a parameter is added "
          "to the model after the optimizer state was initialised; data synthetic (make_data.py)")
DIAGNOSIS = """The optimizer moments m and v were initialised (history cell 5) from a params dict with keys w and b;
cell 6 then adds a 'scale' entry to params. The training step's jax.tree_util.tree_map over (params, grads, m, v)
meets pytrees with different numbers of children and raises ValueError (pytree structure error). The fix
re-initialises the optimizer state after the last change to params."""
FIX = "history cell 6: m, v re-initialised from the final params"
MAKE_DATA = r'''
"""Synthetic house-price regression data: 400 rows, 6 numeric features, price linear in them plus noise."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(11)
os.makedirs("data", exist_ok=True)
n = 400
X = rng.normal(size=(n, 6))
price = X @ np.array([3.0, -1.5, 0.7, 2.2, 0.0, 1.1]) + 50 + rng.normal(0, 0.5, n)
cols = {f"f{i}": X[:, i].round(4) for i in range(6)}
cols["price"] = price.round(3)
pd.DataFrame(cols).to_csv("data/houses.csv", index=False)
'''
CELLS = [
    md("# House prices: linear model with a hand-written Adam in JAX"),
    code(1, """
import numpy as np
import pandas as pd
import jax
import jax.numpy as jnp
"""),
    code(2, """
df = pd.read_csv('data/houses.csv')
X = jnp.array(df.drop(columns='price').values, dtype=jnp.float32)
y = jnp.array(df['price'].values, dtype=jnp.float32)
X.shape, y.shape
"""),
    code(3, """
key = jax.random.PRNGKey(42)
params = {'w': jax.random.normal(key, (X.shape[1],)) * 0.1, 'b': jnp.array(0.0)}

def predict(params, X):
    out = X @ params['w'] + params['b']
    return out * params.get('scale', 1.0)

def mse(params, X, y):
    return jnp.mean((predict(params, X) - y) ** 2)
"""),
    code(4, """
def adam_step(params, grads, m, v, t, lr=0.05, b1=0.9, b2=0.999, eps=1e-8):
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g ** 2, v, grads)
    mhat = jax.tree_util.tree_map(lambda m: m / (1 - b1 ** t), m)
    vhat = jax.tree_util.tree_map(lambda v: v / (1 - b2 ** t), v)
    params = jax.tree_util.tree_map(lambda p, mh, vh: p - lr * mh / (jnp.sqrt(vh) + eps), params, mhat, vhat)
    return params, m, v
"""),
    code(5, """
m = jax.tree_util.tree_map(jnp.zeros_like, params)
v = jax.tree_util.tree_map(jnp.zeros_like, params)
"""),
    code(6, {"buggy": """
# learn an output scale too
params['scale'] = jnp.array(1.0)
""", "fixed": """
# learn an output scale too
params['scale'] = jnp.array(1.0)
m = jax.tree_util.tree_map(jnp.zeros_like, params)
v = jax.tree_util.tree_map(jnp.zeros_like, params)
"""}),
    md("## Training"),
    target("""
grad_fn = jax.jit(jax.value_and_grad(mse))
for t in range(1, 201):
    loss, grads = grad_fn(params, X, y)
    params, m, v = adam_step(params, grads, m, v, t)
    if t % 50 == 0:
        print(t, float(loss))
"""),
]

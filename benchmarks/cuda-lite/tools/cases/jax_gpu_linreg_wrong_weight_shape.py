ID = "jax_gpu_linreg_wrong_weight_shape"
LIBRARY = "jax"
ROOT_CAUSE = "implementation error"
CRASH_TYPE = "tensor shape mismatch"
ENAME = "TypeError"
SOURCE = ("authored course-style notebook, modelled on JAX linear-regression-from-scratch tutorials run on a "
          "GPU runtime, where the weights are initialised with the number of rows instead of the number of "
          "features (dot_general shape errors inside jax.jit); data: seeded synthetic arrays")
DIAGNOSIS = """The weight vector is initialised as jnp.zeros((X.shape[0], 1)) (one weight per row, 1000) instead
of one per feature (8); the first call of the jitted update traces X @ w and raises TypeError (dot_general
requires contracting dimensions to have the same shape, got (8,) and (1000,)). The fix (the target cell) uses
X.shape[1]."""
FIX = "target cell: w = jnp.zeros((X.shape[1], 1))"
CELLS = [
    md("# Linear regression from scratch with JAX (GPU runtime)"),
    code(1, """
import numpy as np
import jax
import jax.numpy as jnp
print(jax.default_backend(), jax.devices())
"""),
    code(2, """
key = jax.random.PRNGKey(0)
k1, k2 = jax.random.split(key)
X = jax.random.normal(k1, (1000, 8))
true_w = jnp.arange(1.0, 9.0).reshape(8, 1)
y = X @ true_w + 0.5 + 0.1 * jax.random.normal(k2, (1000, 1))
X.shape, y.shape
"""),
    code(3, """
def mse(params, X, y):
    w, b = params
    return jnp.mean((X @ w + b - y) ** 2)

@jax.jit
def update(params, X, y, lr=0.1):
    grads = jax.grad(mse)(params, X, y)
    return [p - lr * g for p, g in zip(params, grads)]
"""),
    target({"buggy": """
w = jnp.zeros((X.shape[0], 1))
b = jnp.zeros(())
params = [w, b]
for step in range(200):
    params = update(params, X, y)
print('loss', float(mse(params, X, y)))
print('weights', np.round(np.asarray(params[0]).ravel(), 2))
""", "fixed": """
w = jnp.zeros((X.shape[1], 1))
b = jnp.zeros(())
params = [w, b]
for step in range(200):
    params = update(params, X, y)
print('loss', float(mse(params, X, y)))
print('weights', np.round(np.asarray(params[0]).ravel(), 2))
"""}),
]

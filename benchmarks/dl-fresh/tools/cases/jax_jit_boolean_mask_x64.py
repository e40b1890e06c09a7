ID = "jax_jit_boolean_mask_x64"
LIBRARY = "jax"
ROOT_CAUSE = "implementation error"
CRASH_TYPE = "boolean mask inside jit (non-concrete boolean index)"
ENAME = "NonConcreteBooleanIndexError"
SOURCE = ("authored notebook modelled on JAX questions about `x[x > t]` inside jax.jit (the JAX sharp-bits page, "
          "NonConcreteBooleanIndexError); 64-bit mode switched on for nanosecond timestamps; data synthetic")
DIAGNOSIS = """The notebook enables jax_enable_x64 (cell 1) because it keeps event timestamps in int64 nanoseconds.
The jitted summary function in the target selects the positive returns with a boolean mask, `r[r > 0]`, whose
shape depends on the values: under jit the mask is a tracer and JAX raises NonConcreteBooleanIndexError (an
IndexError). The fix uses jnp.where(r > 0, r, 0.0) and a masked count. The fixed twin also builds
jnp.asarray of int64 nanosecond timestamps (about 1.7e18), which only works with x64 on: a copy that lost the
x64 flag raises OverflowError there."""
FIX = "target cell: jnp.where instead of a boolean mask"
NOTES = """Risky-looking fixed twin: jnp.asarray of nanosecond timestamps overflows int32 unless jax_enable_x64
(set in cell 1) is carried."""
MAKE_DATA = r'''
"""Synthetic tick data: 2000 trades, int64 nanosecond timestamps in 2024, prices as a random walk."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(21)
os.makedirs("data", exist_ok=True)
n = 2000
ts = 1_704_067_200_000_000_000 + np.cumsum(rng.integers(1_000_000, 900_000_000, n))
price = 100 + np.cumsum(rng.normal(0, 0.05, n))
pd.DataFrame({"ts_ns": ts, "price": price.round(4), "size": rng.integers(1, 500, n)}).to_csv(
    "data/ticks.csv", index=False)
'''
CELLS = [
    md("# Tick data: return statistics with JAX (64-bit timestamps)"),
    code(1, """
import jax
jax.config.update('jax_enable_x64', True)
import jax.numpy as jnp
import numpy as np
import pandas as pd
"""),
    code(2, """
ticks = pd.read_csv('data/ticks.csv')
ticks.head()
"""),
    code(3, """
prices = jnp.asarray(ticks['price'].values)
returns = jnp.diff(jnp.log(prices))
returns.dtype, returns.shape
"""),
    target({"buggy": """
@jax.jit
def up_stats(r):
    up = r[r > 0]
    return up.mean(), up.shape[0] / r.shape[0]

ts = jnp.asarray(ticks['ts_ns'].values)
span_s = (ts[-1] - ts[0]) / 1e9
mean_up, frac_up = up_stats(returns)
print(f'{span_s:.0f}s, mean up-move {float(mean_up):.2e}, {float(frac_up):.1%} up')
""", "fixed": """
@jax.jit
def up_stats(r):
    is_up = r > 0
    n_up = is_up.sum()
    return jnp.where(is_up, r, 0.0).sum() / n_up, n_up / r.shape[0]

ts = jnp.asarray(ticks['ts_ns'].values)
span_s = (ts[-1] - ts[0]) / 1e9
mean_up, frac_up = up_stats(returns)
print(f'{span_s:.0f}s, mean up-move {float(mean_up):.2e}, {float(frac_up):.1%} up')
"""}),
]

ID = "tf_data_unbatched_fit"
LIBRARY = "tensorflow"
ROOT_CAUSE = "API misuse"
CRASH_TYPE = "tf.data pipeline without batch"
ENAME = "ValueError"
SOURCE = ("authored notebook modelled on the frequent Keras error when a tf.data.Dataset of single examples is "
          "passed to fit without .batch() ('expected min_ndim=2, found ndim=1'); data synthetic (make_data.py)")
DIAGNOSIS = """The training pipeline is from_tensor_slices((X, y)).shuffle(...).map(normalise).prefetch(...)
with no .batch(): each element is one (8,) example, so fit feeds the Dense model rank-1 inputs and Keras raises
ValueError (Input 0 of layer ... is incompatible: expected min_ndim=2 / expected shape (None, 8)). The fix adds
.batch(32) before prefetch."""
FIX = "history cell 3: .batch(32) in the pipeline"
MAKE_DATA = r'''
"""Synthetic wine-quality-like table: 400 rows, 8 physico-chemical features, quality score 3..8."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(71)
os.makedirs("data", exist_ok=True)
n = 400
X = rng.normal(loc=[7, 0.5, 0.3, 2.5, 0.08, 15, 46, 10], scale=[1.5, 0.2, 0.2, 1.2, 0.03, 9, 30, 1], size=(n, 8))
q = np.clip(np.round(5.6 + 0.4 * (X[:, 7] - 10) - 1.5 * (X[:, 1] - 0.5) + rng.normal(0, 0.5, n)), 3, 8)
cols = ["fixed_acidity", "volatile_acidity", "citric_acid", "residual_sugar", "chlorides",
        "free_so2", "total_so2", "alcohol"]
df = pd.DataFrame({c: X[:, i].round(4) for i, c in enumerate(cols)})
df["quality"] = q.astype(int)
df.to_csv("data/wine.csv", index=False)
'''
CELLS = [
    md("# Wine quality regression from a tf.data pipeline"),
    code(1, """
import numpy as np
import pandas as pd
import tensorflow as tf
import keras
"""),
    code(2, """
df = pd.read_csv('data/wine.csv')
X = df.drop(columns='quality').values.astype('float32')
y = df['quality'].values.astype('float32')
mean, std = X.mean(axis=0), X.std(axis=0)
"""),
    code(3, {"buggy": """
def normalise(x, t):
    return (x - mean) / std, t

train_ds = (tf.data.Dataset.from_tensor_slices((X, y))
            .shuffle(512, seed=0)
            .map(normalise)
            .prefetch(tf.data.AUTOTUNE))
""", "fixed": """
def normalise(x, t):
    return (x - mean) / std, t

train_ds = (tf.data.Dataset.from_tensor_slices((X, y))
            .shuffle(512, seed=0)
            .map(normalise)
            .batch(32)
            .prefetch(tf.data.AUTOTUNE))
"""}),
    code(4, """
keras.utils.set_random_seed(3)
model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation='relu'),
                          keras.layers.Dense(1)])
model.compile(optimizer='adam', loss='mse', metrics=['mae'])
"""),
    target("""
model.fit(train_ds, epochs=3, verbose=0)
print(model.evaluate(train_ds, verbose=0))
"""),
]

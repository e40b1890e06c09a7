ID = "keras_functional_embedding_vocab"
LIBRARY = "keras"
ROOT_CAUSE = "ML model confusion"
CRASH_TYPE = "embedding index out of range"
ENAME = "InvalidArgumentError"
SOURCE = ("authored notebook modelled on Keras functional-API recommenders (two inputs, a shared Dense tower, "
          "an Embedding per category) and the frequent 'indices[...] = N is not in [0, N)' error when "
          "input_dim is the number of categories but ids start at 1; data synthetic (make_data.py)")
DIAGNOSIS = """The store ids run from 1 to 50 and the Embedding is built with input_dim=df['store'].nunique() (50):
id 50 is out of range, and on the CPU TensorFlow's gather raises InvalidArgumentError (indices[...] = 50 is not in
[0, 50)) in model.predict. The fix uses input_dim=int(df['store'].max()) + 1. The model is a functional graph with
two inputs, a layer shared by two branches and a Concatenate; the fixed twin predicts clean."""
FIX = "history cell 3: input_dim = df['store'].max() + 1"
NOTES = """Risky-looking fixed twin: a functional model with two inputs, a shared layer used twice and an
Embedding fed integer ids; it runs clean."""
MAKE_DATA = r'''
"""Synthetic weekly sales: 500 rows, store id 1..50 (every id present), two numeric features, sales."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(51)
os.makedirs("data", exist_ok=True)
n = 500
store = np.concatenate([np.arange(1, 51), rng.integers(1, 51, n - 50)])
rng.shuffle(store)
temp = rng.normal(15, 8, n)
promo = rng.integers(0, 2, n)
sales = 100 + store * 2 + temp * 1.5 + promo * 30 + rng.normal(0, 5, n)
pd.DataFrame({"store": store, "temp": temp.round(2), "promo": promo, "sales": sales.round(2)}).to_csv(
    "data/sales.csv", index=False)
'''
CELLS = [
    md("# Weekly sales: a two-input functional Keras model"),
    code(1, """
import numpy as np
import pandas as pd
import keras
from keras import layers
"""),
    code(2, """
df = pd.read_csv('data/sales.csv')
num = df[['temp', 'promo']].values.astype('float32')
store = df['store'].values.astype('int32')
target = df['sales'].values.astype('float32')
df['store'].nunique(), df['store'].min(), df['store'].max()
"""),
    code(3, {"buggy": """
keras.utils.set_random_seed(1)
n_stores = df['store'].nunique()
num_in = keras.Input(shape=(2,), name='num')
store_in = keras.Input(shape=(1,), name='store', dtype='int32')
shared = layers.Dense(8, activation='relu', name='shared')
emb = layers.Flatten()(layers.Embedding(input_dim=n_stores, output_dim=4)(store_in))
a = shared(num_in)
b = shared(layers.Dense(2)(emb))
out = layers.Dense(1)(layers.Concatenate()([a, b, emb]))
model = keras.Model(inputs=[num_in, store_in], outputs=out)
model.compile(optimizer='adam', loss='mse')
""", "fixed": """
keras.utils.set_random_seed(1)
n_stores = int(df['store'].max()) + 1
num_in = keras.Input(shape=(2,), name='num')
store_in = keras.Input(shape=(1,), name='store', dtype='int32')
shared = layers.Dense(8, activation='relu', name='shared')
emb = layers.Flatten()(layers.Embedding(input_dim=n_stores, output_dim=4)(store_in))
a = shared(num_in)
b = shared(layers.Dense(2)(emb))
out = layers.Dense(1)(layers.Concatenate()([a, b, emb]))
model = keras.Model(inputs=[num_in, store_in], outputs=out)
model.compile(optimizer='adam', loss='mse')
"""}),
    target("""
preds = model.predict([num, store[:, None]], batch_size=128, verbose=0)
print(preds.shape, float(np.abs(preds[:, 0] - target).mean()))
"""),
]

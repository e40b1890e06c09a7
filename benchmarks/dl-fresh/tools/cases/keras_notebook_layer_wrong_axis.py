ID = "keras_notebook_layer_wrong_axis"
LIBRARY = "keras"
ROOT_CAUSE = "implementation error"
CRASH_TYPE = "custom layer weight shape"
ENAME = "ValueError"
SOURCE = ("authored notebook modelled on Keras 'writing your own layers' exercises where build() sizes the "
          "kernel from the wrong axis of input_shape; data synthetic (make_data.py)")
DIAGNOSIS = """GatedDense (a Layer subclass defined in the notebook) builds its kernel with shape
(input_shape[0] or 1, units) instead of (input_shape[-1], units); under model.fit the batch axis is None, so the
kernel is (1, 16) and the matmul with a (batch, 12) input fails when fit first calls the layer: Keras raises
ValueError (Exception encountered when calling GatedDense.call(): could not infer the output shape, the matmul's
shapes (None, 12) and (1, 16) incompatible). The fix uses input_shape[-1]."""
FIX = "history cell 3: build() uses input_shape[-1]"
MAKE_DATA = r'''
"""Synthetic sensor readings: 480 rows, 12 channels, a 3-class machine state."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(61)
os.makedirs("data", exist_ok=True)
n = 480
state = rng.integers(0, 3, n)
X = rng.normal(size=(n, 12)) + state[:, None] * np.linspace(-0.5, 0.5, 12)
df = pd.DataFrame({f"ch{i}": X[:, i].round(4) for i in range(12)})
df["state"] = state
df.to_csv("data/sensors.csv", index=False)
'''
CELLS = [
    md("# Machine state from sensor channels: a gated dense layer of our own"),
    code(1, """
import numpy as np
import pandas as pd
import keras
from keras import layers, ops
"""),
    code(2, """
df = pd.read_csv('data/sensors.csv')
X = df.drop(columns='state').values.astype('float32')
y = df['state'].values
X.shape
"""),
    code(3, {"buggy": """
class GatedDense(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        d = input_shape[0] or 1
        self.kernel = self.add_weight(shape=(d, self.units), initializer='glorot_uniform')
        self.gate = self.add_weight(shape=(d, self.units), initializer='glorot_uniform')
        self.bias = self.add_weight(shape=(self.units,), initializer='zeros')

    def call(self, x):
        return ops.matmul(x, self.kernel) * ops.sigmoid(ops.matmul(x, self.gate)) + self.bias
""", "fixed": """
class GatedDense(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        d = input_shape[-1]
        self.kernel = self.add_weight(shape=(d, self.units), initializer='glorot_uniform')
        self.gate = self.add_weight(shape=(d, self.units), initializer='glorot_uniform')
        self.bias = self.add_weight(shape=(self.units,), initializer='zeros')

    def call(self, x):
        return ops.matmul(x, self.kernel) * ops.sigmoid(ops.matmul(x, self.gate)) + self.bias
"""}),
    code(4, """
keras.utils.set_random_seed(2)
model = keras.Sequential([GatedDense(16), layers.ReLU(), layers.Dense(3, activation='softmax')])
model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
"""),
    target("""
model.fit(X, y, epochs=3, batch_size=32, verbose=0)
print(model.evaluate(X, y, verbose=0))
"""),
]

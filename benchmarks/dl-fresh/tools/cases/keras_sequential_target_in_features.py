ID = "keras_sequential_target_in_features"
LIBRARY = "keras"
ROOT_CAUSE = "data confusion"
CRASH_TYPE = "model input shape mismatch"
ENAME = "ValueError"
SOURCE = ("authored Kaggle-style notebook (churn prediction) modelled on the common Keras error 'Input 0 of layer "
          "... is incompatible with the layer: expected axis -1 of input shape to have value N' after a feature "
          "frame was rebuilt with one column more; data synthetic (make_data.py)")
DIAGNOSIS = """The Sequential model is built for 10 features (keras.Input(shape=(10,))). The target cell takes the
feature matrix as df.drop(columns=['customer_id']).values, which keeps the 'churn' label column: 11 columns, and
model.fit raises ValueError (expected axis -1 of input shape to have value 10). The fix drops 'churn' too."""
FIX = "target cell: drop(columns=['customer_id', 'churn'])"
MAKE_DATA = r'''
"""Synthetic telecom churn table: 600 customers, 10 numeric features, churn 0/1."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(41)
os.makedirs("data", exist_ok=True)
n = 600
X = rng.normal(size=(n, 10))
churn = (X[:, 0] + 0.5 * X[:, 3] - X[:, 7] + rng.normal(0, 0.5, n) > 0.4).astype(int)
df = pd.DataFrame({"customer_id": np.arange(10000, 10000 + n)})
for i in range(10):
    df[f"feat_{i}"] = X[:, i].round(4)
df["churn"] = churn
df.to_csv("data/churn.csv", index=False)
'''
CELLS = [
    md("# Churn prediction with a small Keras MLP"),
    code(1, """
import numpy as np
import pandas as pd
import keras
from keras import layers
"""),
    code(2, """
df = pd.read_csv('data/churn.csv')
df['churn'].mean()
"""),
    code(3, """
keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input(shape=(10,)),
    layers.Dense(32, activation='relu'),
    layers.Dropout(0.2),
    layers.Dense(1, activation='sigmoid'),
])
model.compile(optimizer='adam', loss='binary_crossentropy', metrics=['accuracy'])
model.summary()
"""),
    target({"buggy": """
X = df.drop(columns=['customer_id']).values.astype('float32')
y = df['churn'].values
history = model.fit(X, y, epochs=3, batch_size=64, validation_split=0.2, verbose=0)
print(history.history['val_accuracy'][-1])
""", "fixed": """
X = df.drop(columns=['customer_id', 'churn']).values.astype('float32')
y = df['churn'].values
history = model.fit(X, y, epochs=3, batch_size=64, validation_split=0.2, verbose=0)
print(history.history['val_accuracy'][-1])
"""}),
]

ID = "numpy2_uint8_scale_overflow"
LIBRARY = "numpy"
ROOT_CAUSE = "library cause"
CRASH_TYPE = "NumPy 2 promotion (NEP 50): Python int out of bounds for uint8"
ENAME = "OverflowError"
SOURCE = ("authored notebook modelled on image-processing code that widened 8-bit images with `img * 257` and "
          "broke under NumPy 2's value-based-casting removal (NEP 50); data synthetic (make_data.py)")
DIAGNOSIS = """The images are uint8. To map them to 16-bit for the TIFF-like export the target multiplies by the
Python int 257: NumPy 2 keeps the array's dtype for Python scalars (NEP 50) and raises OverflowError (Python
integer 257 out of bounds for uint8); NumPy 1 silently promoted to uint16. The fix casts first:
imgs.astype(np.uint16) * 257."""
FIX = "target cell: imgs.astype(np.uint16) * 257"
MAKE_DATA = r'''
"""Synthetic 8-bit grayscale images: 64 images of 32x32 with a bright square at a random place."""
import os
import numpy as np

rng = np.random.default_rng(81)
os.makedirs("data", exist_ok=True)
imgs = rng.integers(0, 60, size=(64, 32, 32)).astype(np.uint8)
for k in range(64):
    r, c = rng.integers(0, 24, 2)
    imgs[k, r:r + 8, c:c + 8] = rng.integers(180, 256)
np.savez_compressed("data/scans.npz", imgs=imgs, labels=rng.integers(0, 2, 64))
'''
CELLS = [
    md("# 8-bit scans to 16-bit for the archive"),
    code(1, """
import numpy as np
import pandas as pd
"""),
    code(2, """
data = np.load('data/scans.npz')
imgs, labels = data['imgs'], data['labels']
imgs.dtype, imgs.shape, int(imgs.max())
"""),
    code(3, """
summary = pd.DataFrame({'mean': imgs.reshape(64, -1).mean(axis=1), 'label': labels})
summary.groupby('label')['mean'].describe()
"""),
    target({"buggy": """
imgs16 = imgs * 257
print(imgs16.dtype, int(imgs16.max()))
""", "fixed": """
imgs16 = imgs.astype(np.uint16) * 257
print(imgs16.dtype, int(imgs16.max()))
"""}),
]

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

"""Daemon side: how much memory a transplant worker is expected to hold once it imported a kernel's libraries,
and whether the machine has room for one more in the background (crane.sandbox.prewarm and the pool's refill in
crane.sandbox.transplant: no background worker when psutil's available memory is below the worker's expected
size plus `SandboxOptions.prewarm_free_mb`).
"""

from __future__ import annotations

from collections.abc import Collection

# what a worker's import of each heavy library adds to its resident size (MiB; measured on Linux x86_64 with
# today's environment: TF + Keras 763, JAX 164, pandas 109, polars 54; torch, CuPy and the rest estimated); a
# change in these (a new one imported) refreshes the prewarmed worker
HEAVY_MB = {"tensorflow": 450, "keras": 80, "tf_keras": 80, "jax": 110, "jaxlib": 0, "flax": 40, "optax": 10,
            "torch": 350, "torchvision": 40, "cupy": 200, "transformers": 150, "datasets": 80, "polars": 20,
            "pandas": 50, "pyarrow": 20, "numpy": 10, "sklearn": 40, "scipy": 30, "xgboost": 40, "lightgbm": 30,
            "catboost": 60, "statsmodels": 50, "numba": 80, "triton": 60, "matplotlib": 20, "seaborn": 10}
BASE_MB = 40  # the worker's Python, IPython and CRANE's parts


def expected_mb(modules: list[str]) -> int:
    """A worker's expected resident size once it imported `modules`."""
    return BASE_MB + sum(HEAVY_MB.get(m, 0) for m in modules)


def available_mb() -> int:
    """The memory this machine has available now (psutil), in MiB."""
    import psutil as ps

    return int(ps.virtual_memory().available) >> 20



def no_room(modules: Collection[str], free_mb: int) -> str | None:
    """Why a background worker importing `modules` is not started now (the machine is short of memory), or
    None when there is room for it with `free_mb` MiB to spare."""
    need, have = expected_mb(list(modules)), available_mb()
    if have >= need + free_mb:
        return None
    return f"the machine has {have} MiB available, less than a worker's expected {need} MiB plus {free_mb} MiB kept free"

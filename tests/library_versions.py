"""The (major, minor) of a library where the tests' kernels run: they run this interpreter (start_kernel's
default), so its installed distributions are theirs. For the few expectations that differ between library
releases (the libraries' own behaviour: seaborn 0.13's wording, matplotlib 3.8's keyword-only parameters,
scikit-learn 1.4's NaN-accepting forests); each test that uses it says which release does what. And whether
torch is there (`needs_torch`)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version

import pytest

from crane.rulekit.python_versions import parse_version


def kernel_library(dist: str) -> tuple[int, int]:
    found = parse_version(version(dist))
    assert found is not None, f"{dist}: no (major, minor) in {version(dist)!r}"
    return found


# torch is in the bench extra only below Python 3.12 (pyproject.toml): the tests of torch's values skip without it
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed for this Python (pyproject.toml's "
                                 "bench extra has none from 3.12)")


def skip_without_torch_in(conn) -> None:
    """Skip, saying why, where the kernel behind `conn` (a KernelConnection) cannot import torch: the bench
    extra's kernels from Python 3.12 (today's environment has it on every Python)."""
    if not conn.evaluate("__import__('importlib.util').util.find_spec('torch') is not None"):
        pytest.skip("torch is not installed for this kernel's Python (pyproject.toml's bench extra has none from 3.12)")

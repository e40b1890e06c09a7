"""The (major, minor) of a library where the tests' kernels run: they run this interpreter (start_kernel's
default), so its installed distributions are theirs. For the few expectations that differ between library
releases (the libraries' own behaviour: seaborn 0.13's wording, matplotlib 3.8's keyword-only parameters,
scikit-learn 1.4's NaN-accepting forests); each test that uses it says which release does what."""

from __future__ import annotations

from importlib.metadata import version

from crane.rulekit.python_versions import parse_version


def kernel_library(dist: str) -> tuple[int, int]:
    found = parse_version(version(dist))
    assert found is not None, f"{dist}: no (major, minor) in {version(dist)!r}"
    return found

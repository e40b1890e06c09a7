"""The platform part of the sandbox's confinement (crane.sandbox.confinement): Linux confines every mode here;
macOS (`sandbox_init`) and Windows (job objects) are not implemented, so a run there is `unavailable` with a
reason naming the platform, decided before any state is exported or any worker is started (and refused again
by the worker itself)."""

from __future__ import annotations

import sys

import pytest

from crane.sandbox import confinement, transplant
from crane.sandbox.worker.main import _unconfinable


def test_linux_here_runs_every_mode():
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    here = confinement.current()
    assert isinstance(here, confinement.Linux) and here.unavailable() is None
    assert all(here.runs(m) is None for m in ("layered", "blocking", "transplant"))
    assert _unconfinable(sys.platform) is None


@pytest.mark.parametrize(("system", "name", "how"), [("darwin", "macOS", "sandbox_init"),
                                                      ("win32", "Windows", "job objects"),
                                                      ("freebsd14", "freebsd14", "Linux")])
def test_other_platforms_say_unavailable_naming_the_platform(system, name, how, monkeypatch):
    other = confinement.for_platform(system)
    for mode in ("layered", "blocking", "transplant"):
        why = other.runs(mode) or ""
        assert why.startswith(f"{name}:") and how in why, why
    assert (_unconfinable(system) or "").startswith(f"{name}:")

    class NoKernel:  # the run must stop before it asks the kernel anything
        def __getattr__(self, attr):
            raise AssertionError(f"the kernel was asked for {attr}")

    monkeypatch.setattr(transplant, "current_confinement", lambda: other)
    before = dict(transplant.POOL.idle), set(transplant.POOL.busy)
    v = transplant.transplant(NoKernel(), "x = 1", 5.0)  # type: ignore[arg-type]  # no kernel, on purpose
    assert v.verdict == "unavailable" and (v.reason or "").startswith(f"{name}:"), v
    assert (dict(transplant.POOL.idle), set(transplant.POOL.busy)) == before  # no worker started

"""Which sandbox a run gets (crane.sandbox.portable.choose), with the OS layer's availability given: the portable
sandbox never runs without its platform's OS layer (auto and `portable` then make no run: "none", saying why and
that `guard` runs the guard alone); `guard` is the guard alone, opt-in; the flag and the editor's setting take it."""

from __future__ import annotations

import argparse

from crane.sandbox import confinement, portable
from crane.sandbox.options import SandboxOptions, add_sandbox_arguments, options_from_args

MISSING = "this Linux kernel offers no Landlock (5.13+ with Landlock enabled is needed)"


def test_without_an_os_layer_auto_and_portable_make_no_run_and_say_why():
    other = confinement.for_platform("darwin")
    for pref in ("auto", "portable"):
        which, why = portable.choose(pref, other, os_layer=lambda: MISSING)
        assert which == "none" and why is not None, (pref, which, why)
        assert why.startswith(MISSING) and portable.NO_OS_LAYER in why and "--sandbox guard" in why
    assert portable.choose("os", other, os_layer=lambda: MISSING) == ("os", None)


def test_with_an_os_layer_auto_runs_the_portable_sandbox_where_the_os_one_cannot():
    other = confinement.for_platform("win32")
    which, why = portable.choose("auto", other, os_layer=lambda: None)
    assert which == "portable" and (why or "").startswith(other.unavailable() or "?")
    assert portable.choose("portable", other, os_layer=lambda: None) == ("portable", portable.ASKED)


def test_guard_is_the_guard_alone_whatever_the_platform_offers():
    def none() -> str | None:
        return None

    def missing() -> str | None:
        return MISSING

    for layer in (none, missing):
        assert portable.choose("guard", confinement.for_platform("linux"), os_layer=layer) == (
            "guard", portable.GUARD_ASKED)


def test_the_flag_takes_guard():
    p = argparse.ArgumentParser()
    add_sandbox_arguments(p)
    assert options_from_args(p.parse_args(["--sandbox", "guard"])) == SandboxOptions(confinement="guard")


def test_speculate_makes_no_run_without_an_os_layer_and_says_why(monkeypatch):
    """`auto` on a platform whose OS sandbox cannot run and whose OS layer cannot be set up: no worker, no fork, an
    `unavailable` verdict whose reason says why (the rules then decide); `guard` still runs (not asserted here:
    tests/sandbox/test_portable_round5.py)."""
    from crane.sandbox import oslayer
    from crane.sandbox.fork_runner import speculate

    monkeypatch.setattr(portable, "current_confinement", lambda: confinement.for_platform("darwin"))
    monkeypatch.setattr(oslayer, "available", lambda *a, **k: MISSING)
    v = speculate(None, "1/0", 5.0, sandbox=SandboxOptions(confinement="auto"))  # type: ignore[arg-type]
    assert v.verdict == "unavailable" and v.transplant is None, v
    assert (v.reason or "").startswith(MISSING) and portable.NO_OS_LAYER in (v.reason or ""), v.reason

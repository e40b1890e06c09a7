"""The OS layer chosen once per platform (crane.sandbox.oslayer): one module each, a typed description of what it
confines and whether it ran, and a real transplant worker carrying it; no layer is claimed that did not run."""

from __future__ import annotations

import sys

import pytest

from crane.sandbox import oslayer
from crane.sandbox.oslayer import OsLayer, linux, macos, windows

pytestmark = pytest.mark.portable_platform


def test_one_module_per_platform():
    assert oslayer._backend("darwin") is macos
    assert oslayer._backend("win32") is windows and oslayer._backend("cygwin") is windows
    assert oslayer._backend("linux") is linux and oslayer._backend("freebsd14") is linux
    for mod in (linux, macos, windows):
        assert mod.CONFINES and all(callable(getattr(mod, f))
                                    for f in ("launch", "started", "prepare_folder", "release"))


def test_a_layer_names_itself_only_when_it_ran():
    ran = OsLayer("sandbox-exec", "darwin", ("network",), True)
    assert ran.names() == ["sandbox-exec"]
    assert ran.failed("trial failed").names() == [] and ran.failed("trial failed").why_not == "trial failed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux layer's daemon side")
def test_on_linux_the_daemon_adds_nothing_and_claims_nothing(tmp_path):
    how = oslayer.launch(["/usr/bin/python3", "-c", "0"], {"HOME": str(tmp_path)}, str(tmp_path))
    assert how.argv == ["/usr/bin/python3", "-c", "0"] and how.env == {}
    assert how.layer.name == "landlock" and not how.layer.ran and "worker" in (how.layer.why_not or "")


def test_a_real_transplant_worker_carries_its_platform_s_layer(tmp_path):
    from crane.sandbox.transplant import Worker

    w = Worker(sys.executable, {"HOME": str(tmp_path)}, str(tmp_path), [], warm=False)
    try:
        assert isinstance(w.os_layer, OsLayer) and w.os_layers == w.os_layer.names()
        assert w.os_layer.platform == ("linux" if sys.platform.startswith("linux") else sys.platform)
        if sys.platform.startswith("linux"):
            assert w.os_layers == []  # Landlock is the worker's to report
        if w.os_layer.ran:
            assert w.os_layers == [w.os_layer.name]
        else:
            assert w.os_layer.why_not
    finally:
        w.end()


def test_whether_this_platform_s_layer_can_run_is_checked_for_real():
    """Here (Linux): Landlock asked of the kernel; in the CI matrix's macOS and Windows jobs, the real trials must
    pass for the interpreter running the tests."""
    why = oslayer.available()
    if sys.platform.startswith("linux"):
        from crane.sandbox.worker.linux import linux_layer_available
        assert why == linux_layer_available()
    else:
        assert why is None, why
    if sys.platform != "darwin":
        assert "macOS only" in (oslayer.available(platform="darwin") or "")
    if sys.platform != "win32":
        assert "Windows" in (oslayer.available(platform="win32") or "")

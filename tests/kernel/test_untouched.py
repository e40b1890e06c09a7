"""crane.kernel.untouched: the proof the bench reports ("kernel left untouched") must catch a touched kernel."""

from __future__ import annotations

import pytest

from crane.kernel.errors import KernelError
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    kernel = start_kernel(tmp_path_factory.mktemp("untouched"))
    try:
        kernel.connection.run_cell("x = [1, 2, 3]", timeout=60)
        yield kernel.connection
    finally:
        kernel.shutdown()


def test_private_requests_leave_it_untouched(conn):
    with Untouched(conn) as check:
        assert conn.evaluate("len(x) + 1") == 4
    assert check.unchanged is True and check.outputs == []


def test_a_user_visible_run_is_caught(conn):
    with Untouched(conn) as check:
        conn.run_cell("print('hello')", timeout=60)  # a real run: an execute_input, a stream, a new count
    assert check.unchanged is False
    assert {m["msg_type"] for m in check.outputs} >= {"execute_input", "stream"}


def test_a_silent_namespace_change_is_caught(conn):
    with Untouched(conn) as check:
        conn.evaluate("globals().__setitem__('leaked', 1)")  # no output, but the user's namespace changed
    assert check.unchanged is False and check.outputs == []
    conn.evaluate("globals().pop('leaked')")


@pytest.mark.parametrize("which", ["before", "after_in_parent", "after_in_child"])
def test_an_at_fork_handler_registered_silently_is_caught(conn, which):
    """The interpreter's three at-fork handler lists, found by one walk of the kernel's objects for all their
    anchors (threading's and logging's handlers): a handler added to any of them is a change, and the only one."""
    with Untouched(conn) as check:
        conn.evaluate(f"__import__('os').register_at_fork({which}=lambda: None) is None")
    assert check.unchanged is False and set(check.changes()) == {"atfork"}, check.changes()


def test_an_unknown_connection_is_a_clear_error(conn):
    class Detached:
        target = owner = None

    with pytest.raises(KernelError, match="unknown"):
        Untouched(Detached())  # type: ignore[arg-type]  # a connection of no known kind, on purpose


# code of CRANE's in the kernel is compiled under `<crane-kernel/...>` names (crane.kernel.private_module)
_CRANE_CODE = ("(lambda g: (exec(compile(%r, '<crane-kernel/fake.py>', 'exec'), g), g['f']())[1])({})")


def test_crane_code_calling_the_users_hooks_is_caught(conn):
    """Ids prove nothing about code that ran: each effect sentinel must fire when CRANE's code reaches it."""
    cases = {
        "json.dumps": "import json\ndef f():\n    return json.dumps(1)\n",
        "builtins.open": "def f():\n    with open('/proc/self/stat') as fh:\n        return len(fh.read()) > 0\n",
        "profile hook": "def g():\n    return 1\ndef f():\n    return g()\n",
        "sentinel": "import pickle, sys\ndef f():\n    return len(pickle.dumps(sys.modules['__main__'].sentinel)) > 0\n",
    }
    for what, src in cases.items():
        with Untouched(conn, sentinel="sentinel") as check:
            conn.evaluate(_CRANE_CODE % src)
        assert check.unchanged is False and check.hits, (what, check.hits)
        assert any(what.split()[0].split(".")[0] in h for h in check.hits), (what, check.hits)
    assert conn.evaluate("'sentinel' in globals()") is False  # removed after the block


def test_the_sentinels_see_nothing_when_crane_code_runs_hooks_off(conn):
    src = ("import sys, threading, json\ndef g():\n    return json.dumps(2)\ndef f():\n"
           "    saved = sys.getprofile()\n    sys.setprofile(None)\n    try:\n        return g()\n"
           "    finally:\n        sys.setprofile(saved)\n")
    with Untouched(conn, sentinel="sentinel") as check:
        conn.evaluate(_CRANE_CODE % src.replace("json.dumps(2)", "str(2)"))
    assert check.unchanged is True and check.hits == [], check.hits

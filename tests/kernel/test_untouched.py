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


def test_an_unknown_connection_is_a_clear_error(conn):
    class Detached:
        target = owner = None

    with pytest.raises(KernelError, match="unknown"):
        Untouched(Detached())  # type: ignore[arg-type]  # a connection of no known kind, on purpose

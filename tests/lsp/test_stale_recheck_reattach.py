"""A stale re-check pending for one attachment does not stand for the next (lsp/kernels.KernelSupervisor).

The supervisor's bookkeeping alone: its timer host records `call_later` calls and the scheduler records requests
(the real ones need a running server; tests/lsp/test_stale_recheck.py drives those end to end). A kernel that is
re-attached, or a notebook closed and opened again, while a re-check timer of the earlier attachment is pending
must still get its stale cells checked again (the review reproduced them staying stale for good).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from crane.lsp.kernels import KernelSupervisor


def _supervisor() -> tuple[KernelSupervisor, list, list]:
    timers: list = []
    requested: list = []
    sup = KernelSupervisor.__new__(KernelSupervisor)
    sup.host = SimpleNamespace(call_later=lambda delay, fn, *args: timers.append((delay, fn, args)))
    sup._stale_delay, sup._stale_due = {}, {}
    return sup, timers, requested


def _session(requested: list, att: object) -> Any:
    scheduler = SimpleNamespace(request=lambda uris, delay: requested.append(sorted(uris)))
    return SimpleNamespace(uri="file:///nb.ipynb", closed=False, attachment=att, scheduler=scheduler,
                           stale_cells={"cell-1"})


def _fire_all(timers: list) -> None:
    while timers:
        _, fn, args = timers.pop(0)
        fn(*args)


def test_a_reattached_kernels_stale_cells_are_checked_again():
    sup, timers, requested = _supervisor()
    first = SimpleNamespace(alive=True, busy=False)
    session = _session(requested, first)
    sup.stale_published(session)  # a re-check pending for the first attachment
    session.attachment = SimpleNamespace(alive=True, busy=False)  # re-attached before it fired
    sup.stale_published(session)  # the new attachment's checks published stale too
    _fire_all(timers)
    assert requested == [["cell-1"]]


def test_a_dead_kernels_pending_recheck_hands_over_to_the_new_one():
    sup, timers, requested = _supervisor()
    first = SimpleNamespace(alive=True, busy=False)
    session = _session(requested, first)
    sup.stale_published(session)
    first.alive = False  # the kernel died and a new one was found
    session.attachment = SimpleNamespace(alive=True, busy=False)
    _fire_all(timers)
    assert requested == [["cell-1"]]


def test_a_reopened_notebook_is_not_skipped_for_the_closed_ones_timer():
    sup, timers, requested = _supervisor()
    att = SimpleNamespace(alive=True, busy=False)
    closed = _session(requested, att)
    sup.stale_published(closed)
    closed.closed = True
    reopened = _session(requested, SimpleNamespace(alive=True, busy=False))
    sup.stale_published(reopened)
    _fire_all(timers)
    assert requested == [["cell-1"]]

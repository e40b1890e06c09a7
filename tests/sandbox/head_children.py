"""A warm head's children, read from /proc (heads fork the next run's process ahead: worker/head._fork_ahead)."""

from __future__ import annotations

import threading
from pathlib import Path


def children(pid: int) -> list[int] | None:
    """The process's children, over all its threads (a thread may end while it is read: passed over), or None once
    the process itself is gone."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        threads = list(tasks.iterdir())
    except OSError:
        return None
    kids: list[int] = []
    for task in threads:
        try:
            kids.extend(int(k) for k in (task / "children").read_text().split())
        except OSError:
            continue
    return kids


def forked_ahead(head: int, ran: tuple[int, ...], timeout: float = 180.0) -> int:
    """The child the head forked ahead for its next run, never the process of a run that already ran (`ran`: a
    sealed run's process may still be ending when its verdict arrives, worker/head._frame_sealed). Waited for as an
    event (the head forks it after the verdict is sent); the bound only ends a failure, which says what was seen."""
    done = threading.Event()
    seen: list[int] | None = []
    waited = 0.0
    while not done.wait(0.05):
        seen = children(head)
        if seen is None:
            raise AssertionError(f"the head {head} is gone (it never forked its next run's process)")
        fresh = [k for k in seen if k not in ran]
        if fresh:
            return fresh[0]
        waited += 0.05
        if waited >= timeout:
            break
    raise AssertionError(f"the head {head} forked no process ahead in {timeout:.0f} s (its children: {seen})")

"""Portable sandbox, worker side: the cell's ways to a frame object that CPython audits, refused from user code.

The frames below the cell's are CRANE's (the worker's loop, the run's set-up: their locals hold the guard and the
audit state), so a frame the cell gets hold of is a walk (`f_back`, `f_locals`, `f_globals`) to the switch that
turns the Python layers off. `sys._getframe` and `inspect`'s frame functions are refused by the guard; this
audit hook (one more, beside worker/portable.py's, whose per-event path it leaves alone) refuses what CPython
reports of the rest, when user code does it while the guard is on:
- `object.__getattr__` of `tb_frame` (a traceback: `sys.exc_info()[2]`, `e.__traceback__`, `sys.exception()`),
  `gi_frame`, `cr_frame`, `ag_frame` (a generator's, coroutine's, async generator's), also through `getattr`,
  `operator.attrgetter` or `map` (the reading frame is the user's either way);
- `sys._current_frames` and `sys._current_exceptions` (every thread's frame).
Library code keeps them (IPython's and `traceback`'s formatting read `tb_frame`).
Not reported by CPython, so not refused here (docs/sandbox.md): `f_back`/`f_locals`/`f_globals` of a frame got
otherwise, a function's `__globals__`/`__closure__` (the replaced functions' originals), and library functions that
hand frames back (`traceback.walk_stack(None)`, which calls `sys._getframe` itself): code written to escape a
Python sandbox still reaches CRANE's state through them; on Linux the Landlock layer holds regardless.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

_FRAME_ATTRS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
_FRAME_EVENTS = frozenset(("sys._current_frames", "sys._current_exceptions"))


def refuse_frame_reads(active: Callable[[], bool], is_user: Callable[[Any], bool],
                       refuse: Callable[[str], object]) -> None:
    """Install the audit hook: `active()`: the guard is on (the cell runs); `is_user(code)`: user code;
    `refuse(what)`: ends the run (blocked)."""
    getframe = sys._getframe

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "object.__getattr__":
            if len(args) < 2 or args[1] not in _FRAME_ATTRS:
                return
            what = f"reading {args[1]} (a frame: the walk to CRANE's state)"
        elif event in _FRAME_EVENTS:
            what = f"{event} (every thread's frame: the walk to CRANE's state)"
        else:
            return
        if not active():
            return
        caller = getframe(1)
        if caller is not None and is_user(caller.f_code):
            refuse(what)

    sys.addaudithook(hook)

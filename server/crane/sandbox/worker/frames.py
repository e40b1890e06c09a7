"""Portable sandbox, worker side: the cell's ways to CRANE's frames and functions, refused from user code.

The frames below the cell's are CRANE's (the worker's loop, the run's set-up: their locals hold the guard and the
audit state), and CRANE's functions (the wrappers the guard puts in `os`, `signal`, `sqlite3`, ...) share one
namespace, the worker module's: a frame or a function the cell gets hold of is a walk (`f_back`, `f_locals`,
`f_globals`, `__globals__`, `__closure__`) to the switch that turns the Python layers off. `sys._getframe` and
`inspect`'s frame functions are refused by the guard; `refuse_frame_reads` adds, while the guard is on (the cell
runs):
- an audit hook (one more, beside worker/portable.py's, whose per-event path it leaves alone) refusing what CPython
  reports: `object.__getattr__` of `tb_frame` (a traceback: `sys.exc_info()[2]`, `e.__traceback__`),
  `gi_frame`, `cr_frame`, `ag_frame`, also through `getattr`, `operator.attrgetter` or `map` (the reading frame
  is the user's either way); `sys._current_frames` and `sys._current_exceptions` (every thread's frame);
- what CPython does not audit, by its descriptors (`hide_crane_objects`: the frame type's `f_back`, `f_locals`,
  `f_globals` and the function type's `__globals__`, `__closure__` are replaced, once per process, by properties
  that ask the original descriptor and then look at what it gives): a frame of CRANE's (its globals are the
  worker module's) read as `f_back`, its `f_locals`/`f_globals`, and a CRANE function's `__globals__`/`__closure__`
  and a bound method's `__self__` that is an instance of a CRANE class (the profile hook's, `sys.getprofile()`)
  are refused when user code reads them (the run is `blocked`, layer `call guard`); library code reading them on
  the cell's behalf (`traceback.walk_stack`, `logging`'s caller search, `inspect.getclosurevars`, IPython's
  traceback formatting) gets the real `f_back` (a walk keeps its depth: `walk_stack` counts frames) but an empty
  namespace for a CRANE frame's locals and globals and no closure for a CRANE function — so honest stack walks,
  pandas' `find_stack_level`, logging and tracebacks work as before, and a CRANE frame a library hands the cell
  gives it nothing. CRANE's own reads, and every read while the guard is off, get the real values. The worker
  module leaves `sys.modules` (`import _crane_sandbox` finds nothing; the bootstrap holds it).
Library code keeps tracebacks' frames (IPython's and `traceback`'s formatting read `tb_frame`).
Not covered (docs/sandbox.md): attributes of CRANE objects the cell is handed otherwise (the capture streams'
`vars()`, a `__self__` a library reads for the cell): code written to escape a Python sandbox may still find one;
the OS layer (Landlock + seccomp on Linux) holds regardless.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import types
from collections.abc import Callable
from typing import Any

_FRAME_ATTRS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
_FRAME_EVENTS = frozenset(("sys._current_frames", "sys._current_exceptions"))
# the descriptors replaced (type -> attribute names) and the current policy: one install per process, each run's
# `refuse_frame_reads` only points the policy at its own guard
_FR_HIDDEN = {types.FrameType: ("f_back", "f_locals", "f_globals"), types.FunctionType: ("__globals__", "__closure__"),
              types.MethodType: ("__self__",)}
_FR_POLICY: dict[str, Any] = {}
_FR_REFERENTS = gc.get_referents  # taken when the worker module is built (the guard replaces gc's later)


def refuse_frame_reads(active: Callable[[], bool], is_user: Callable[[Any], bool],
                       refuse: Callable[[str], object]) -> None:
    """Install the audit hook and the descriptors: `active()`: the guard is on (the cell runs); `is_user(code)`:
    user code; `refuse(what)`: ends the run (blocked)."""
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
    hide_crane_objects(globals(), active, is_user, refuse)
    mod = sys.modules.get("_crane_sandbox")
    if mod is not None and getattr(mod, "__dict__", None) is globals():
        del sys.modules["_crane_sandbox"]  # `import _crane_sandbox` from the cell: not found (boot.py holds it)


def _fr_type_dict(t: type) -> dict:
    """The type's own attribute dict (behind its read-only mappingproxy)."""
    return next(r for r in _FR_REFERENTS(t.__dict__) if isinstance(r, dict))


def hide_crane_objects(crane: dict, active: Callable[[], bool], is_user: Callable[[Any], bool],
                       refuse: Callable[[str], object]) -> list[str]:
    """Replace the frame and function descriptors (see the module docstring); `crane`: the namespace whose frames
    and functions are CRANE's (the frames under the caller's are CRANE's too: the worker's bootstrap). A second
    call only changes the policy. Returns the attributes replaced."""
    below: list[types.FrameType] = []
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:  # the frames under CRANE's now (the bootstrap's, whose locals hold the worker module)
        if f.f_globals is not crane:
            below.append(f)
        f = f.f_back
    _FR_POLICY.update(crane=crane, active=active, is_user=is_user, refuse=refuse, below=tuple(below),
                      below_ids=frozenset(map(id, below)))  # (alive as long as the worker: their ids stay theirs)
    if _FR_POLICY.get("installed"):
        return _FR_POLICY["installed"]
    originals = {(t, n): t.__dict__[n] for t, names in _FR_HIDDEN.items() for n in names}
    frame_globals = originals[(types.FrameType, "f_globals")].__get__
    frame_code = types.FrameType.__dict__["f_code"].__get__
    func_globals = originals[(types.FunctionType, "__globals__")].__get__
    getframe, frame_t, func_t, method_t = sys._getframe, types.FrameType, types.FunctionType, types.MethodType
    type_module = type.__dict__["__module__"].__get__

    def decide(what: str) -> bool:
        """True: the reader gets the real value; False: a library reader gets the harmless one. A user reader
        is refused here (the run ends, or a session's cell gets the refusal raised)."""
        p = _FR_POLICY
        reader = getframe(2)
        if reader is None or frame_globals(reader, frame_t) is p["crane"]:
            return True
        if p["is_user"](frame_code(reader, frame_t)):
            p["refuse"](f"reading {what} (CRANE's: the walk to its state)")
        return False

    def crane_frame(f: Any) -> bool:
        p = _FR_POLICY
        return f is not None and (frame_globals(f, frame_t) is p["crane"] or id(f) in p["below_ids"]) \
            and p["active"]()

    def crane_function(fn: Any) -> bool:
        return func_globals(fn, func_t) is _FR_POLICY["crane"] and _FR_POLICY["active"]()

    def crane_object(obj: Any) -> bool:  # an instance of a class of CRANE's (the guard, the capture streams, ...)
        p = _FR_POLICY
        return type_module(type(obj), type) == p["crane"].get("__name__") and p["active"]()

    def frame_attr(name: str, harmless: Callable[..., Any], of_result: bool) -> property:
        get = originals[(frame_t, name)].__get__

        def read(f: Any) -> Any:
            value = get(f, frame_t)
            if (crane_frame(value) if of_result else crane_frame(f)) and not decide(f"a frame's {name}"):
                return harmless(f, frame_t)
            return value
        return property(read, doc=f"frame.{name} (CRANE's frames hidden from the cell: worker/frames.py)")

    def function_attr(name: str, harmless: Callable[[Any], Any]) -> property:
        get = originals[(func_t, name)].__get__

        def read(fn: Any) -> Any:
            value = get(fn, func_t)
            if crane_function(fn) and not decide(f"a function's {name}"):
                return harmless(fn)
            return value
        return property(read, doc=f"function.{name} (CRANE's functions hidden from the cell: worker/frames.py)")

    def method_self() -> property:
        get = originals[(method_t, "__self__")].__get__

        def read(m: Any) -> Any:
            value = get(m, method_t)
            if crane_object(value):
                decide("a bound method's __self__")  # user code: refused; a library gets it (a call needs it)
            return value
        return property(read, doc="method.__self__ (CRANE's objects hidden from the cell: worker/frames.py)")

    replaced = {
        (frame_t, "f_back"): frame_attr("f_back", originals[(frame_t, "f_back")].__get__, True),
        (frame_t, "f_locals"): frame_attr("f_locals", lambda f, t: {}, False),
        (frame_t, "f_globals"): frame_attr("f_globals", lambda f, t: {"__name__": "<crane>"}, False),
        (func_t, "__globals__"): function_attr("__globals__", lambda fn: {"__name__": "<crane>"}),
        (func_t, "__closure__"): function_attr("__closure__", lambda fn: None),
        (method_t, "__self__"): method_self(),
    }
    modified = ctypes.pythonapi.PyType_Modified
    modified.argtypes = [ctypes.py_object]
    for (t, name), prop in replaced.items():
        _fr_type_dict(t)[name] = prop
        modified(t)
    _FR_POLICY["installed"] = [f"{t.__name__}.{n}" for t, n in replaced]
    return _FR_POLICY["installed"]

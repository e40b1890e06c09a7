"""Fork sandbox, kernel side: running a cell in the confined child and classifying the outcome.

The cell is transformed and compiled as IPython would (magics, last-expression display), run against the
child's copy-on-write namespace, and described: verdict (crash / no-crash / blocked / timeout), exception,
line mapped back to the cell, a short traceback. `_child_run` is the one-shot child's main.
"""

from __future__ import annotations

import errno
import functools
import linecache
import operator
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import CodeType
from typing import Any

from crane.sandbox.kernel.armed import (  # kernel: strip
    budget_off,
    budget_timer,
    libraries_now,
    settle,
    streams_now,
    threads_now,
    timers_now,
)
from crane.sandbox.kernel.audit import _ends_process  # kernel: strip
from crane.sandbox.kernel.common import (  # kernel: strip
    _CO_COROUTINE,
    _FENCE_GLOBALS,
    _SETUP,
    _TAMPERED,
    CELL_FILENAME,
    SandboxBlocked,
    _channel_digest,
    _close_channel,
    _Ctx,
    _fence,
    _fence_shape,
    _real_exit,
    _seal_other,
    _sent,
    _untraced,
    _write_json,
)
from crane.sandbox.kernel.fork_pools import revive_pools  # kernel: strip
from crane.sandbox.kernel.isolation import _machine_memory_bytes, _prepare_child  # kernel: strip
from crane.sandbox.kernel.miniature import arm_loops, artefact, cell_names, loop_note, loop_unended  # kernel: strip
from crane.sandbox.shared.seal import (  # kernel: strip
    _SEAL_HASH,
    SEAL_RECORD,
    SEAL_TAMPERED,
    SEAL_TRIES,
    bind_wait,
    quiet_parts,
    seal_call,
)

# what a cell's source is parsed and compiled with: the C parser's own node types and flag (issue 41), never `ast`'s
# Python-level names — `ast.parse` is a Python function, `ast.Module` a name a cell can rebind to a subclass whose
# `body` reads empty: a kept session command that did either turned every later command into an empty one, `no-crash`
# (IPython parses through `compile` itself, so in the kernel those cells still raise). Nor `_ast`'s names at the
# time of the call: a cell can rebind `_ast.Module`/`_ast.Interactive`/`_ast.Expr` as well (the review reproduced
# it), so the node types are taken once from trees the C parser made (their types are the interpreter's own, whatever
# a module attribute says) and the flags are CPython's fixed values (Include/cpython/compile.h); globals of this
# module, so `_fence` watches them by identity.
_ONLY_AST = 0x0400  # PyCF_ONLY_AST
_TOP_AWAIT = 0x2000  # PyCF_ALLOW_TOP_LEVEL_AWAIT
_INTERACTIVE_NODE = type(compile("0", "<crane>", "single", _ONLY_AST, dont_inherit=True))
_MODULE_NODE = type(_zero := compile("0", "<crane>", "exec", _ONLY_AST, dont_inherit=True))
_EXPR_NODE = type(_zero.body[0])
del _zero


def _compile_plan(shell: Any, source: str, filename: str, transformed: str,
                  bound: Any = None) -> tuple[list[CodeType], str]:
    """IPython's transforms (magics, shell escapes, help) are already applied to `transformed`; one code
    object per top-level statement, the last expression compiled 'single' so its value goes to the display
    hook (IPython's `last_expr`). `bound`: a loop miniature's rewrite (kernel/miniature.arm_loops), after the
    shell's own AST transformers."""
    tree = compile(transformed, filename, "exec", _ONLY_AST, dont_inherit=True)  # (`ast.parse`'s own call)
    if shell is not None:
        try:
            tree = shell.transform_ast(tree)
        except Exception:
            pass
    if bound is not None:
        try:
            tree = bound.visit(tree)
        except Exception:
            pass
    linecache.cache[filename] = (len(transformed), None, transformed.splitlines(True), filename)
    interactivity = getattr(shell, "ast_node_interactivity", "last_expr") if shell is not None else "last_expr"
    body = tree.body
    # a top-level `await` compiles only where the shell's `%autoawait` is on, as in IPython (issue 42 part 2, h10)
    flags = (getattr(getattr(shell, "compile", None), "flags", 0) or 0) | (
        0 if getattr(shell, "autoawait", True) is False else _TOP_AWAIT)
    quiet = source.rstrip().endswith(";")
    plan = []
    for i, node in enumerate(body):
        interactive = isinstance(node, _EXPR_NODE) and not quiet and (
            interactivity == "all" or (interactivity in ("last_expr", "last_expr_or_assign", "last") and i == len(body) - 1)
        )
        if interactive:
            code = compile(_INTERACTIVE_NODE([node]), filename, "single", flags, dont_inherit=True)
        else:
            code = compile(_MODULE_NODE([node], []), filename, "exec", flags, dont_inherit=True)
        plan.append(code)
    return plan, transformed


def _exec_plan(ctx: _Ctx, plan: list[CodeType], ns: dict[str, Any], untraced: bool = False) -> None:
    """Run the cell's statements in `ns`, IPython's builtin trap on (`get_ipython`, `exit`... as in the kernel's
    cell). `untraced` (a one-shot fork run: kernel/common._untraced): all of them in ONE `sys.call_tracing`, so the
    cell's code is traced as it would be in the kernel while CRANE's frames are not. One call, not one per statement:
    on 3.11 a hook the cell sets in one statement reaches the next only within the same call (the thread's tracing
    flag is copied from the caller into each new evaluation loop, and `call_tracing` restores the caller's when it
    returns).
    The trap is entered and left by plain calls, never as a `with` block around the cell (issue 41): a context
    manager's `__exit__` is code the cell can change (`type(get_ipython().builtin_trap).__exit__.__code__`, or a
    kept session command's patch for every later one), and an `__exit__` that returns true swallows the exception
    going through it, so a raising cell reached CRANE's clean branch and came back `no-crash` on every path. The
    cell's exception goes straight to CRANE's caller; the trap is left only after a clean end (a raised run's
    process ends, is parked or dropped: its builtins are never a later cell's)."""
    trap = ctx.shell.builtin_trap
    trap.__enter__()
    if untraced or ctx.untraced:
        _call_tracing(_run_statements, (plan, ns, True))
    else:
        _run_statements(plan, ns)
    trap.__exit__(None, None, None)
    settle(ctx.audit_state, _ends_process)  # what the cell left armed that ends the process after it (kernel/armed)


def _run_statements(plan: list[CodeType], ns: dict[str, Any], untraced: bool = False) -> None:
    """The cell's statements, one after the other. A statement with a top-level `await` runs through `_awaited`:
    from inside `sys.call_tracing` (`untraced`), back in CRANE's untraced frames (`_untraced_step`). No `try` here:
    a frame of CRANE's that the cell's exception leaves by a handler is one a line tracer of the cell's can jump
    out of (a `finally` closing the statement's event loop let a raising cell's tracer jump back to the loop's head
    and come back `no-crash`, issue 41)."""
    loop = _kernel_like_loop()
    for code in plan:
        if code.co_flags & _CO_COROUTINE:
            if loop is not None:  # (the statement's own loop runs it: `_awaited`)
                _SET_RUNNING(None)
            if untraced:
                _untraced_step(_awaited, eval(code, ns))
            else:
                _awaited(eval(code, ns))
            if loop is not None:
                _SET_RUNNING(loop)
        else:
            exec(code, ns)
    if loop is not None:  # (a raising statement ends the run: its process is not a later cell's)
        _SET_RUNNING(None)
        loop._thread_id = None
        loop.close()


def _own_asyncio(name: str) -> Any:
    """`_asyncio`'s C function `name` (the interpreter's own: a builtin function of that module under that name; the
    module is loaded, never imported here), else None."""
    m = sys.modules.get("_asyncio")
    f = getattr(m, name, None) if m is not None else None
    return f if type(f) is type(len) and getattr(f, "__self__", None) is m and f.__name__ == name else None


def bind_asyncio() -> None:
    """Bind `_asyncio`'s running-loop functions (at install, and by a copy's worker once its shell is made: before
    the run's fence is taken, which then holds them)."""
    global _GET_RUNNING, _SET_RUNNING
    _GET_RUNNING, _SET_RUNNING = _own_asyncio("_get_running_loop"), _own_asyncio("_set_running_loop")


_GET_RUNNING: Any = None
_SET_RUNNING: Any = None
bind_asyncio()


def _kernel_like_loop() -> Any:
    """An event loop this thread sees as running while the cell's statements run, as a Jupyter kernel runs every
    cell inside its own (round 16, F10): `asyncio.run(main())` is the kernel's RuntimeError ("cannot be called from
    a running event loop"), `asyncio.get_event_loop().run_until_complete(...)` its "This event loop is already
    running", `asyncio.get_running_loop()` answers; in a copy they ran clean (a false no-crash). A fresh loop marked
    running in this thread (it never runs: a task the cell schedules on it stays pending, as one the kernel's loop
    would run only after the cell); None where a loop runs here already (a fork of the kernel holds the kernel's)
    or `_asyncio`'s functions are not the interpreter's."""
    if _GET_RUNNING is None or _SET_RUNNING is None or _GET_RUNNING() is not None:
        return None
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        loop = asyncio.new_event_loop()
        loop._thread_id = threading.get_ident()
    except Exception:
        return None
    _SET_RUNNING(loop)
    return loop


def _awaited(coro: Any) -> None:
    """A statement with a top-level `await`: its coroutine run to its end on an event loop of its own (as
    `asyncio.run` would: the kernel's loop is not running in a copy), through `sys.call_tracing` (the cell's hooks
    see it as in the kernel). Whether it ended is not asyncio's word (issue 41): `run_until_complete` returns the
    task's result, and a cell can patch the loop (`asyncio.new_event_loop`, `BaseEventLoop.run_until_complete`: a
    library patch) or set its own task done (`asyncio.Future.set_result(asyncio.current_task(), None)`) and then
    raise, and came back `no-crash` on every copy and layered path. The coroutine is awaited by a one-line wrapper
    of CRANE's (`_await_template`: no local, no handler, a tracer's jump can only run its line again), and after
    the loop the wrapper's own frame says how it ended: its last instruction the `return` (`_returned_lasti`, the
    same code run on a coroutine that returns) or not; not (the statement raised, or did not end, and yet the loop
    returned) is `blocked`. The check is a copy of `_await_check` whose constants are the wrapper and its frame,
    made before any code of the cell's can run again here, and called from a tuple made then (on 3.13 the cell can
    write this frame's locals while the loop runs)."""
    import asyncio
    loop = asyncio.new_event_loop()
    run_until, close = loop.run_until_complete, loop.close  # (their lookups may run the cell's code: before the
    # wrapper and its check exist)
    wrapper = _fenced(_await_template, {"<coro>": coro})()
    check = _fenced(_await_check, {"<wrapper>": wrapper, "<frame>": wrapper.cr_frame, "<returned>": _returned_lasti(),
                                   "<pick>": (int, _await_refused)})
    tuple(map(_CALL, (_partial(_call_tracing, run_until, (wrapper,)), check, close)))


async def _await_template() -> Any:
    return await "<coro>"  # type: ignore[misc]  # (a template: `_awaited`'s copy, the statement's coroutine)


def _await_check() -> None:
    "<pick>"["<frame>".f_lasti != "<returned>" or "<wrapper>".cr_frame is not None]()  # type: ignore[operator, attr-defined]


async def _await_returns() -> None:
    """(a coroutine that returns: `_returned_lasti`)"""


def _returned_lasti() -> int:
    """The last instruction of `_await_template`'s frame when its awaited coroutine returned (3.11: 20; 3.12 and 3.13:
    24); one that raised stops elsewhere. Taken on CRANE's own coroutine, each time (nothing kept a cell can
    change)."""
    wrapper = _fenced(_await_template, {"<coro>": _await_returns()})()
    frame = wrapper.cr_frame
    try:
        wrapper.send(None)
    except StopIteration:
        pass
    return frame.f_lasti


def _await_refused() -> None:
    raise SandboxBlocked("the cell's awaited statement did not end by its own code, yet its event loop returned "
                         "(its task set done by the cell's code, or a patched event loop): no verdict")


def _untraced_step(fn: Callable[..., Any], *args: Any) -> None:
    """`fn(*args)` in CRANE's untraced frames, called from the cell's traced statements (`_run_statements`): as
    kernel/common._untraced, from inside a trace function, but the thread's trace function (the cell's own) is
    set back at once, so what `fn` hands to `sys.call_tracing` is traced as in the kernel. No value; its exception
    goes straight up through the trace call (no box a cell could swap on 3.13; CPython then unsets the trace
    function, as a raising statement ends the cell)."""
    old = _gettrace()

    def enter(frame: Any, event: str, arg: Any) -> None:
        _settrace(old)
        fn(*args)

    _settrace(enter)
    _fence_shape()  # (its 'call' event runs `enter`)


_call_tracing = sys.call_tracing  # (bound at install, as every name the outcome path calls: kernel/common._fence)
_gettrace, _settrace = sys.gettrace, sys.settrace
_partial = functools.partial
_CALL = operator.methodcaller("__call__")


def _exception_chain(exc: BaseException | None) -> list[BaseException]:
    seen: set = set()
    out: list = []
    while exc is not None and id(exc) not in seen and len(out) < 20:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _inside(path: Any, roots: list[str]) -> bool:
    try:
        p = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)


def _is_landlock_denial(ctx: _Ctx, exc: OSError) -> bool:
    """EACCES/EROFS that the confinement caused (not the file's own permissions)."""
    if exc.errno not in (errno.EACCES, errno.EROFS):
        return False
    if exc.errno == errno.EROFS or os.geteuid() == 0:
        return True
    target = exc.filename if isinstance(exc.filename, (str, bytes)) else None
    if target is None:
        return True
    if ctx.mode == "layered":
        return not _inside(target, ctx.places)
    parent = os.path.dirname(os.path.abspath(os.fsdecode(target))) or "."
    return os.access(target, os.W_OK) or (not os.path.exists(target) and os.access(parent, os.W_OK))


_SQLITE_DENIAL = ("readonly database", "unable to open database file", "disk i/o error")
# errors the private layer itself can cause, where the real run would have succeeded
_LAYER_ERRNOS = {
    errno.EXDEV: "a rename the private layer cannot do",
    errno.EOVERFLOW: "a file whose owner the sandbox does not map",
    errno.ENOSPC: "the sandbox's private layer is full",
    errno.EDQUOT: "the sandbox's private layer is full",
}
# errors the sandbox's own limits cause in either mode (its file-size limit, its memory limit on thread stacks)
_LIMIT_ERRNOS = {errno.EFBIG: "a file larger than the sandbox's file-size limit"}
# processes the kernel started before the run are not the sandbox's children (multiprocessing asserts it)
_NOT_OUR_CHILD = re.compile(r"can only (?:test|join|close|kill|terminate|start) a (?:child )?process", re.I)


def _near_process_bound(bound: int) -> bool:
    """Layered mode: /proc shows only the sandbox's pid namespace; near its bound, fork fails with EAGAIN."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                n += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return n >= min(250, max(1, bound) // 2)


def _confinement_error(ctx: _Ctx, e: OSError) -> str | None:
    """Why an OSError the cell got comes from the confinement (then the verdict is "blocked"), or None."""
    if e.errno == errno.EPERM or _is_landlock_denial(ctx, e):
        return f"the sandbox refused an operation the cell attempted: {e}"
    if e.errno in _LIMIT_ERRNOS:
        return f"{_LIMIT_ERRNOS[e.errno]}: {e}"
    if ctx.mode == "layered" and e.errno in _LAYER_ERRNOS:
        return f"{_LAYER_ERRNOS[e.errno]}: {e}"
    if e.errno == errno.ECONNREFUSED and ctx.mode == "layered":
        return f"a local service outside the sandbox cannot be reached from it: {e}"
    if e.errno == errno.EAGAIN and ctx.mode == "layered" and _near_process_bound(
            ctx.args["max_processes"]):
        return f"the sandbox's bound on the number of processes was reached: {e}"
    if e.errno == errno.EBADF and ctx.fds.get("degraded"):
        return f"a file the kernel holds open for writing is read-only in the sandbox (too large to copy): {e}"
    if e.errno == errno.ENOTSOCK and ctx.fds.get("sunk"):
        return f"a connection opened before the run is closed in the sandbox: {e}"
    return None


_DENIAL_TEXT = re.compile(r"operation not permitted|read-only file system|permission denied|\[errno (?:1|13|30)\]"
                          r"|errno[ =:]+(?:1|13|30)\b|\b(?:EPERM|EACCES|EROFS)\b", re.I)
# layered mode: a UNIX socket that existed before the run (a local database server's) refuses connections
_REFUSED_TEXT = re.compile(r"connection refused|\[errno 111\]|\bECONNREFUSED\b", re.I)
_QUOTED_PATH = re.compile(r"""(?:file path: |['"])(/[^'"\s]+|[\w.-]+\.\w{1,6})""")


def _text_denial(ctx: _Ctx, exc: BaseException) -> str | None:
    """A library that met the confinement in C code and reported it in its own words (torch.save's
    "open file failed because of errno 13", a database driver's "could not create socket: Operation not
    permitted", a subprocess's captured stderr): the message, or None. A permission error about a path
    inside the sandbox's writable places is the file's own (a real crash), not the sandbox's."""
    texts = []
    for part in (exc, getattr(exc, "stderr", None), getattr(exc, "output", None)):
        if isinstance(part, bytes):
            part = part.decode("utf-8", "replace")
        try:
            texts.append(str(part) if part is not None else "")
        except Exception:
            pass
    text = "\n".join(texts)[:20000]
    if ctx.mode == "layered" and _REFUSED_TEXT.search(text):
        return "a local service outside the sandbox cannot be reached from it: " + text.strip().splitlines()[0][:300]
    m = _DENIAL_TEXT.search(text)
    if not m:
        return None
    if re.search(r"permission denied|errno[ =:\]]*13|EACCES", m.group(0), re.I) and os.geteuid() != 0:
        roots = ctx.places if ctx.mode == "layered" else [ctx.scratch]
        paths = _QUOTED_PATH.findall(text)
        if paths and all(_inside(p, roots) for p in paths):
            return None
    return text.strip().splitlines()[0][:300] if text.strip() else m.group(0)


def _safe_str(e: object) -> str:
    try:
        return str(e)[:2000]
    except Exception:
        return ""


# what torch/CUDA say when a GPU call finds no device or driver (the transplant worker has none): any mention of
# CUDA (cudaError..., "no CUDA GPUs", "Torch not compiled with CUDA"), the driver, cuDNN or NCCL
_GPU_GAP = re.compile(r"AcceleratorError|CUDA|NVIDIA driver|device-side|cudnn|nccl", re.I)


def _raised_in_torch_cuda(e: BaseException) -> bool:
    """The exception came from torch.cuda's own code (an Event, a Stream, device properties ...)."""
    try:
        return any("/torch/cuda/" in f.filename.replace("\\", "/") for f in traceback.extract_tb(e.__traceback__))
    except Exception:
        return False


def _classify(ctx: _Ctx, exc: BaseException | None, as_limit: int) -> tuple[str, str | None]:
    """(verdict, reason) for an exception raised by the cell, or for a clean run (exc None)."""
    if exc is None:
        if ctx.denied:
            return "blocked", ctx.denied[0]
        return "no-crash", None
    chain = _exception_chain(exc)
    for e in chain:
        if isinstance(e, SandboxBlocked):
            return "blocked", str(e.strerror or e)
    for e in chain:
        if isinstance(e, OSError):
            why = _confinement_error(ctx, e)
            if why:
                return "blocked", why
    if ctx.denied:
        return "blocked", ctx.denied[0]
    for e in chain:
        why = _text_denial(ctx, e)
        if why:
            return "blocked", f"the sandbox's confinement refused something the cell's code did: {why}"
    for e in chain:
        if type(e).__name__ == "OperationalError" and any(s in str(e).lower() for s in _SQLITE_DENIAL):
            return "blocked", f"the sandbox refused a database write: {e}"
    for e in chain:
        text = _safe_str(e)
        if isinstance(e, RuntimeError) and "new thread" in text:
            return "blocked", f"the sandbox's memory limit left no room for another thread's stack: {text}"
        if isinstance(e, AssertionError) and _NOT_OUR_CHILD.search(text):
            return "blocked", f"a worker process the kernel started is not the sandbox's child: {text}"
    if _SETUP.get("devices_mapped") and not any(getattr(e, "_crane_device", False) for e in chain):
        for e in chain:  # a GPU call the CPU stand-in cannot answer (worker/devices): nothing certain about the GPU run
            text = f"{type(e).__name__}: {_safe_str(e)}"
            if _GPU_GAP.search(text) or _raised_in_torch_cuda(e):
                return "blocked", ("the cell made a GPU call that the transplant's CPU stand-in for the kernel's GPU "
                                   f"cannot answer: {text[:300]}")
    for e in chain:
        if isinstance(e, MemoryError):
            wanted = getattr(e, "_total_size", None)
            machine = _machine_memory_bytes(portable=ctx.args.get("confinement") in ("portable", "guard"))
            if isinstance(wanted, int) and machine and wanted > machine:
                return "crash", f"the allocation ({wanted} bytes) exceeds this machine's memory"
            return "timeout", f"the cell exceeded the sandbox memory budget ({ctx.memory_mb} MiB)"
    return "crash", None


def _line_offset(source: str, transformed: str | None) -> int:
    """IPython's transforms drop leading blank lines; every other transform keeps line numbers."""
    if not transformed:
        return 0
    lines = source.splitlines()
    lead = 0
    while lead < len(lines) and not lines[lead].strip():
        lead += 1
    return lead if len(transformed.splitlines()) == len(lines) - lead else 0


def _cell_line(filename: str, lineno: int, n_src: int, source: str, offset: int = 0) -> int | None:
    if filename == CELL_FILENAME:
        lineno += offset
        return max(1, min(lineno, n_src)) if n_src else lineno
    if filename in ("<timed exec>", "<timed eval>", "<string>") and source.lstrip().startswith("%%"):
        return max(1, min(lineno + 1, n_src))
    return None


def _describe_exception(exc: BaseException, source: str, transformed: str | None = None) -> dict:
    tb = exc.__traceback__
    frames = traceback.extract_tb(tb)
    n_src = len(source.splitlines())
    offset = _line_offset(source, transformed)
    line = None
    for fr in frames:
        ln = _cell_line(fr.filename, fr.lineno or 0, n_src, source, offset)
        if ln is not None:
            line = ln
    if isinstance(exc, SyntaxError) and exc.filename == CELL_FILENAME and exc.lineno:
        line = max(1, min(exc.lineno + offset, n_src or exc.lineno))
    keep = [fr for fr in frames if not (fr.filename or "").startswith(("<crane-sandbox/", "<crane-kernel/"))]
    if len(keep) > 8:
        keep = keep[:3] + keep[-5:]
    short = []
    for fr in keep:
        where = "cell" if fr.filename == CELL_FILENAME else fr.filename
        text = f"{where}, line {fr.lineno}, in {fr.name}"
        if fr.line:
            text += f": {fr.line.strip()[:160]}"
        short.append(text)
    try:
        evalue = str(exc)
    except Exception:
        evalue = "<str() failed>"
    short.append(f"{type(exc).__name__}: {evalue[:500]}")
    return {"ename": type(exc).__name__, "evalue": evalue[:4000], "line": line, "traceback": short}


def _cell_begins(ctx: _Ctx, source: str, seen: dict) -> list[CodeType]:
    """IPython's transforms and the compile (`seen["transformed"]`), then the cell's code is what runs: the audit
    guard's `running`, and on a one-shot run's channel the "cell" line (a death from here on is the cell's)."""
    shell = ctx.shell
    seen["transformed"] = transformed = shell.transform_cell(source)
    bound = arm_loops(ctx.kept, shell, _line_offset(source, transformed))  # a loop miniature: loops bounded
    plan, _ = _compile_plan(shell, source, CELL_FILENAME, transformed, bound)
    # the pools an earlier cell made, working again in this process (before the threads are counted: the twins'
    # are not the cell's; kernel/fork_pools.py)
    _, unrevived = revive_pools(shell.user_ns, cell_names(None, transformed), ctx.mode == "layered")
    if unrevived:  # (the cell would wait for ever on the kernel's threads: it does not run)
        ctx.denied.extend(unrevived)
        raise SandboxBlocked(errno.EPERM, unrevived[0])
    ctx.audit_state["threads"] = threads_now()  # (the threads and timers the cell starts: kernel/armed.settle)
    ctx.audit_state["libs"] = libraries_now()
    ctx.audit_state["timers"] = timers_now()
    ctx.audit_state["streams"] = streams_now()
    ctx.audit_state["running"] = True  # (kernel/audit._guard_process_end)
    if ctx.args["mode"] == "run" and ctx.result_fd >= 0:
        _write_json(ctx.result_fd, {"event": "cell"})
    return plan


def _cell_record(ctx: _Ctx, exc: BaseException | None, source: str, seen: dict, t0: float) -> dict:
    """The verdict record of a cell that raised `exc` (None: it ended clean), without captured streams."""
    ctx.audit_state["running"] = False
    if exc is None and ctx.shown_exc is not None:
        exc = ctx.shown_exc
    ctx.shown_exc = None
    elapsed = (time.perf_counter() - t0) * 1000.0
    verdict, reason = _classify(ctx, exc, ctx.confinement.get("as_limit", 0))
    if verdict == "crash" and ctx.kept:
        why = artefact(exc)
        if why:  # a miniature run's crash that the smaller data may have caused: inconclusive
            verdict, reason = "timeout", (f"the miniature run raised {type(exc).__name__}, which may be an artefact "
                                          f"of the smaller data ({why}); the full run did not finish in time")
    if verdict == "no-crash" and ctx.kept:
        unended = loop_unended()  # a clean run with a `while` cut short: it may never end (kernel/miniature)
        if unended:
            verdict, reason = "timeout", unended
    if verdict in ("crash", "no-crash") and ctx.kept:
        reason = loop_note(verdict) or reason  # what a loop miniature's verdict rests on (kernel/miniature)
    rec = {"verdict": verdict, "reason": reason, "elapsed_ms": elapsed}
    unsettled = ctx.audit_state.pop("unsettled", None)  # threads the cell left running (kernel/armed.settle)
    if unsettled and verdict == "no-crash":
        rec.update(reason=unsettled, unsettled=True)  # (only likely: what they do later was not seen)
    if exc is not None:
        rec.update(_describe_exception(exc, source, seen.get("transformed")))
    return rec


def run_source(ctx: _Ctx, source: str) -> dict:
    """Run one cell's source in this (confined) process; the verdict record (without captured streams)."""
    shell = ctx.shell
    ns = shell.user_ns if shell is not None else {}
    t0 = time.perf_counter()
    exc = None
    seen: dict = {}
    try:
        _exec_plan(ctx, _cell_begins(ctx, source, seen), ns)
    except BaseException as e:  # noqa: BLE001 - the cell's own exception, SystemExit included
        exc = e
    finally:
        ctx.audit_state["running"] = False
    return _cell_record(ctx, exc, source, seen, t0)


def _child_run(args: dict, shell: Any, parent: int, on_main: bool) -> None:
    """The one-shot child: set up, run the cell, write the record and wait, sealed, to be ended by the parent (see
    kernel/common: the seal). How the cell ended is said by where the seal is made — one place for a cell that
    raised, one for a clean end, the code a constant there — never by a value the cell's code could change.
    All of it runs untraced (`common._untraced`): no trace, profile or `sys.monitoring` hook the cell sets ever
    runs in a frame of CRANE's, which the cell's statements leave only by returning or raising."""
    _untraced(_child_main, args, shell, parent, on_main)


def _child_main(args: dict, shell: Any, parent: int, on_main: bool) -> None:
    t0 = time.perf_counter()
    ctx = None
    try:
        ctx = _prepare_child(args, shell, parent, on_main)
    except BaseException as exc:  # never run user code unconfined
        fd = _SETUP.get("result_fd", -1)
        if fd >= 0:
            _write_json(fd, {"verdict": "unavailable", "reason": f"sandbox setup failed: {exc}"})
        return  # (before the cell: what it wrote counts without a seal, assemble.py)
    setup_ms = (time.perf_counter() - t0) * 1000.0
    if args["miniature"] and not ctx.kept:
        why = ctx.miniature_error or "the cell reads no large DataFrame, array, tensor or dataset"
        _write_json(ctx.result_fd, {"verdict": "timeout", "reason": f"no miniature run: {why}", "setup_ms": setup_ms})
        _seal_other(ctx, SEAL_RECORD)
    run = _fenced_run(ctx)  # (its frame's locals hold nothing the check after the cell reads: its constants do)
    budget_timer(float(args["budget_s"]) + 1.5)
    run(ctx, args, shell, setup_ms)


def _fenced_run(ctx: _Ctx) -> Callable[[_Ctx, dict, Any, float], None]:
    """A copy of `_cell_then_seal` whose constants are what the check after the cell needs, taken now, before the
    cell (`_seal_constants`). A running frame's constants cannot change; on 3.13 (PEP 667) its locals can, through
    `f_locals`."""
    return _fenced(_cell_then_seal, _seal_constants(ctx.done_fd))


def _seal_constants(done_fd: int) -> dict[str, Any]:
    """What a template's check after the cell and its seal read, taken now, before the cell: the fence's snapshot,
    its code and what to run it with (fresh globals and builtins made from immutable pairs at the check, so no name
    the cell rebinds or adds reaches the fence's own code), and what the seal is made with (libc's `syscall`, the
    hash the seal's digest is by, `os.pipe`, `os.write`, the parent's wake-up `done_fd`). The keys are the string
    constants `_fenced` replaces (this one-shot fork run's `_cell_then_seal`, the transplant worker's templates)."""
    import builtins
    import gc
    from types import FunctionType

    space = _fence.__globals__  # (CRANE's private module: every part's globals are one namespace there)
    taken = {
        "<le>": frozenset.__le__, "<before>": _fence(),
        "<fn>": type.__call__.__get__(FunctionType),  # (bound: `FunctionType.__call__` would call a function)
        "<fence>": _fence.__code__, "<dict>": dict,
        "<globals>": tuple((k, space[k]) for k in (*_FENCE_GLOBALS, "__name__")),
        "<builtins>": tuple(vars(builtins).items()), "<space>": space,
        "<modules>": sys.modules, "<module>": builtins,
        "<pipe>": os.pipe, "<done>": done_fd, "<write>": os.write,
        "<int>": int.from_bytes, "<hash>": _SEAL_HASH,
        "<tries>": range(SEAL_TRIES), "<gc_off>": gc.disable, **_c_seal(), **_quiet_constants(),
    }
    bind_wait(taken)  # (the seal of the other codes, shared/seal.wait_sealed, bound before the cell too)
    return taken


def _quiet_constants() -> dict[str, Any]:
    """What stops, again, what code of the cell's set while its record was made, before CRANE writes it (issue 41),
    each bound before the cell and none a Python function: every signal blocked by a raw rt_sigprocmask(2) made as
    the seal is (`_c_seal`'s pointer: Python's `signal.pthread_sigmask` runs the handlers already due after it sets
    the mask, and one could unblock it again), `sys.unraisablehook` set to a C builtin (a signal due with no Python
    handler is reported there), every callable Python handler set to SIG_IGN by `_signal.signal` (which runs the
    handlers already due first); in passes, until a pass after which no callable handler is set and the hook is
    CRANE's (checked by C builtins alone: no code of the cell's runs from then on). Tries run out, or a handler's
    exception between the passes' own `try`s: the process ends as TAMPERED, CRANE's bytes never written.
    The signals are an immutable tuple of exact ints (a set in the template's constants could be emptied by the
    cell through its frames' code objects). Keys: `<nr_mask>`, `<all>`, `<byref>`, `<signals>`, `<getsignal>`,
    `<signal>`, `<ign>`, `<callable>`, `<any>`, `<map>`, `<sysdict>`, `<get>`, `<setitem>`, `<hook>`, `<is>`,
    `<end>` and `<tampered>` (C `_exit(87)`: a process whose cell changed CRANE's own code, `_TAMPERED`)."""
    return {**quiet_parts(), "<end>": _real_exit(), "<tampered>": _TAMPERED}


def _c_seal() -> dict[str, Any]:
    """How a template makes its sealed system calls, set up before the cell from `_ctypes`' immutable C types alone,
    so that no code of the cell's runs in one (issue 41): libc's `syscall` called through the C base's own call slot
    (`_ctypes.CFuncPtr.__call__`; never the pointer's class's, which a cell can rebind) on a pointer made at the call
    by the C base's own `__new__` from a private pointer class declared here without `argtypes`, `restype` or
    `errcheck` (its C fields fixed at its making: no `from_param` converter, no `_check_retval_`; the result a C
    int); every argument an exact `int` (passed as a C int: no Python code) or, for the 64-bit ones (an address, the
    digest, the mark), an instance of a private unsigned 64-bit type made at the call by its metaclass's C
    `from_buffer_copy` (no `__new__`/`__init__`/`from_param` of a class a cell can patch; made after the cell, so
    never an object the cell could hold and change). Before, the seal called a ctypes pointer whose class's
    `__call__`, whose `argtypes` converters (`c_ulong.from_param`, then `argtypes` set back to the same list) and
    whose `errcheck` a cell could set: its code then ran in the seal and chose the seal's code (a raising cell
    sealed clean). Keys: `<call>`, `<new>`, `<sealer>`, `<sc>` (libc's `syscall`), `<copy>`, `<u64>`, `<to>`,
    `<order>`, `<mark>` (SEAL_MAGIC's bytes). Raises where the C types are not immutable (then the run is
    unavailable: nothing is sealed through a class a cell could change)."""
    return seal_call()  # (shared/seal: the wait of the other codes, `wait_sealed`, is made the same way)


def _fenced(template: Callable[..., Any], taken: dict[str, Any]) -> Callable[..., Any]:
    """A copy of `template` whose string constants named in `taken` are the objects there (no nested code object
    of the template is changed: a template names them in its own code only). No import: a fork session's kept head
    fences each command's templates in a process an earlier command ran in (kernel/session._fenced_command)."""
    function: Any = type(_fenced)  # (types.FunctionType)
    code = template.__code__
    consts = tuple(taken[c] if type(c) is str and c in taken else c for c in code.co_consts)
    return function(code.replace(co_consts=consts), template.__globals__, template.__name__)


def _cell_then_seal(ctx: _Ctx, args: dict, shell: Any, setup_ms: float) -> None:
    """The cell, then its record and the seal (a template: see `_fenced_run`). Whether anything the record is made
    or sealed with was rebound is checked after the record is out (no code of the cell's runs after the check, but
    a thread it left), and the seal made, from this run's constants alone: no global, no builtin of the module, no
    local but `sent` (what CRANE wrote on the channel: changed, the seal matches nothing). Each seal is shared/seal's
    `wait_sealed` written out: wake the parent, then wait for good in a read(2) of a new pipe nobody writes, its
    registers saying SEAL_MAGIC, the code (a literal here) and the digest of `sent`."""
    ns = shell.user_ns if shell is not None else {}
    seen: dict = {}
    t1 = time.perf_counter()
    try:
        _exec_plan(ctx, _cell_begins(ctx, args["source"], seen), ns, untraced=True)
    except BaseException as e:  # noqa: BLE001 - the cell's own exception, SystemExit included
        _epilogue_begins(ctx)
        rec = _cell_record(ctx, e, args["source"], seen, t1)
        try:  # (tries run out, or a handler of the cell's raised between the passes' own `try`s: `_TAMPERED`)
            for _ in "<tries>":  # (passes until one ran no code of the cell's: `_quiet_constants`)
                try:
                    "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                      "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                    "<setitem>".__call__("<sysdict>", "unraisablehook", "<hook>")  # type: ignore[operator]
                    for s in "<signals>":
                        if "<callable>".__call__("<getsignal>".__call__(s)):  # type: ignore[operator]
                            "<signal>".__call__(s, "<ign>")  # type: ignore[operator]
                except BaseException:  # noqa: BLE001, S110 - a handler of the cell's ran (and raised): checked below
                    pass
                if "<any>".__call__("<map>".__call__("<callable>", "<map>".__call__(  # type: ignore[operator]
                        "<getsignal>", "<signals>"))) is False and "<is>".__call__("<get>".__call__(  # type: ignore
                        "<sysdict>", "unraisablehook"), "<hook>") is True:
                    # no handler of the cell's is set, nor its unraisable hook: no code of its runs from here on
                    "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                      "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                    "<gc_off>".__call__()  # type: ignore[operator]
                    sent = _record_write(ctx, rec, setup_ms)
                    if "<le>".__call__("<before>", "<fn>".__call__("<fence>", "<dict>".__call__(  # type: ignore[operator]
                            "<globals>", __builtins__="<dict>".__call__("<builtins>")))(  # type: ignore[operator]
                            "<space>", "<modules>", "<module>")) is True:
                        # sealed: the cell raised (SEAL_RAISED, 2); the parent ends this process
                        try:
                            "<write>".__call__("<done>", b"d")  # type: ignore[operator]
                        except OSError:
                            pass
                        while True:
                            "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0,  # type: ignore[operator]
                                              "<pipe>".__call__().__getitem__(0), 0, 1, 2,  # type: ignore[operator]
                                              "<copy>".__call__("<u64>", "<to>".__call__("<int>".__call__(  # type: ignore[operator]
                                                  "<hash>".__call__(sent, digest_size=8).digest(), "little"),  # type: ignore
                                                  8, "<order>")), "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
                    break
            else:  # (tries ran out: a handler of the cell's still set; CRANE's bytes never written)
                "<end>".__call__("<tampered>")  # type: ignore[operator]
        except BaseException:  # noqa: BLE001 - a handler of the cell's raised between the passes' `try`s
            "<end>".__call__("<tampered>")  # type: ignore[operator]
    else:
        _epilogue_begins(ctx)
        rec = _cell_record(ctx, None, args["source"], seen, t1)
        try:  # (tries run out, or a handler of the cell's raised between the passes' own `try`s: `_TAMPERED`)
            for _ in "<tries>":  # (passes until one ran no code of the cell's: `_quiet_constants`)
                try:
                    "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                      "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                    "<setitem>".__call__("<sysdict>", "unraisablehook", "<hook>")  # type: ignore[operator]
                    for s in "<signals>":
                        if "<callable>".__call__("<getsignal>".__call__(s)):  # type: ignore[operator]
                            "<signal>".__call__(s, "<ign>")  # type: ignore[operator]
                except BaseException:  # noqa: BLE001, S110 - a handler of the cell's ran (and raised): checked below
                    pass
                if "<any>".__call__("<map>".__call__("<callable>", "<map>".__call__(  # type: ignore[operator]
                        "<getsignal>", "<signals>"))) is False and "<is>".__call__("<get>".__call__(  # type: ignore
                        "<sysdict>", "unraisablehook"), "<hook>") is True:
                    # no handler of the cell's is set, nor its unraisable hook: no code of its runs from here on
                    "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), "<nr_mask>", 0,  # type: ignore[operator]
                                      "<byref>".__call__("<copy>".__call__("<u64>", "<all>")), 0, 8)  # type: ignore
                    "<gc_off>".__call__()  # type: ignore[operator]
                    sent = _record_write(ctx, rec, setup_ms)
                    if "<le>".__call__("<before>", "<fn>".__call__("<fence>", "<dict>".__call__(  # type: ignore[operator]
                            "<globals>", __builtins__="<dict>".__call__("<builtins>")))(  # type: ignore[operator]
                            "<space>", "<modules>", "<module>")) is True:
                        # sealed: the cell ended clean (SEAL_CLEAN, 1); the parent ends this process
                        try:
                            "<write>".__call__("<done>", b"d")  # type: ignore[operator]
                        except OSError:
                            pass
                        while True:
                            "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0,  # type: ignore[operator]
                                              "<pipe>".__call__().__getitem__(0), 0, 1, 1,  # type: ignore[operator]
                                              "<copy>".__call__("<u64>", "<to>".__call__("<int>".__call__(  # type: ignore[operator]
                                                  "<hash>".__call__(sent, digest_size=8).digest(), "little"),  # type: ignore
                                                  8, "<order>")), "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]
                    break
            else:  # (tries ran out: a handler of the cell's still set; CRANE's bytes never written)
                "<end>".__call__("<tampered>")  # type: ignore[operator]
        except BaseException:  # noqa: BLE001 - a handler of the cell's raised between the passes' `try`s
            "<end>".__call__("<tampered>")  # type: ignore[operator]
    # CRANE's code or what it calls was rebound: sealed so (SEAL_TAMPERED, 4; its digest names nothing)
    try:
        "<write>".__call__("<done>", b"d")  # type: ignore[operator]
    except OSError:
        pass
    while True:
        "<call>".__call__("<new>".__call__("<sealer>", "<sc>"), 0,  # type: ignore[operator]
                          "<pipe>".__call__().__getitem__(0), 0, 1, 4, 0,  # type: ignore[operator]
                          "<copy>".__call__("<u64>", "<mark>"))  # type: ignore[operator]


def _epilogue_begins(ctx: _Ctx, keep_tool: int | None = None) -> None:
    """Right after the cell: its budget timer, its trace/profile/monitoring hooks, its Python signal handlers and
    the garbage collector's runs (finalizers, gc callbacks) stop, so no code of the cell's runs between CRANE's
    statements on that account while the record is made (its exception's own methods still run, see docs).
    `keep_tool`: the portable call guard's `sys.monitoring` tool, which stays on for the threads the cell left
    running (worker/guard.CallGuard.leave: off for this thread alone)."""
    import gc
    import sys
    ctx.audit_state["running"] = False
    budget_off()
    sys.settrace(None)
    sys.setprofile(None)
    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        for tool in range(6):
            if tool == keep_tool:
                continue
            try:
                mon.set_events(tool, 0)
                mon.free_tool_id(tool)
            except (ValueError, AttributeError):
                pass
    gc.disable()
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError, TypeError):
            pass


def _record(ctx: _Ctx, rec: dict, setup_ms: float, before: frozenset, fence: Any, sealed: bool = True,
            end: Callable[[int], Any] | None = None) -> int:
    """A one-shot run's epilogue, the forked child's (`_child_run`) and the transplant worker's (worker/main._finish):
    write the record on the channel and close it; the digest of everything CRANE wrote there. A cell that rebound
    CRANE's code or what the record is made with gets no record: the seal says so instead, or, where no parent
    reads a seal (not `sealed`: a portable worker on macOS or Windows), its process ends with `_TAMPERED` through
    `end` (bound before the cell). Unsealed, the channel's end is said to A at once (`_record_out`; sealed: the
    seal's wake-up says it)."""
    if not before <= fence():  # (frozen pairs: kernel/common._fence)
        if sealed:
            _seal_other(ctx, SEAL_TAMPERED)
        (end or _real_exit())(_TAMPERED)
    digest = _channel_digest(_record_write(ctx, rec, setup_ms))
    if not sealed:
        _record_out(ctx)
    return digest


def _record_write(ctx: _Ctx, rec: dict, setup_ms: float) -> bytes:
    """Write the record on the channel and close it; what `_write_json` returned (every byte CRANE wrote there,
    or meant to: a channel the cell closed), for the seal's digest."""
    rec["setup_ms"] = setup_ms
    rec["displays"] = ctx.displays
    rec["denied"] = ctx.denied[:20]
    rec["absorbed"] = ctx.absorbed[:20]
    rec["confinement"] = ctx.confinement
    ctx.audit_state["bypass"] = True
    sent = None  # (the seal names CRANE's record, delivered or not: kernel/common, `_SEALED`)
    if ctx.result_fd >= 0:
        try:
            sent = _write_json(ctx.result_fd, rec)
        except OSError:
            sent = _sent()  # (the cell closed it: what CRANE meant to write there, never what it holds)
    _close_channel(ctx)
    return _sent() if sent is None else sent


def _record_out(ctx: _Ctx) -> None:
    """Layered mode: tell A (the supervisor) that the record is out, so it closes its end of the channel and the
    daemon's read reaches EOF now (the daemon reads the channel to its end: a record is final only then)."""
    if ctx.done_fd >= 0:
        try:
            os.write(ctx.done_fd, b"d")
        except OSError:
            pass

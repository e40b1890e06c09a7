"""The transplant worker's program (`python -c <this file's text>`, in the kernel's interpreter).

It moves the daemon's pipes (its stdin and stdout) to private descriptors, reads one JSON header line from
stdin's naming the private modules to build (CRANE's cloudpickle and the sandbox's worker module: their sources
travel in the header), builds them as fresh modules, and hands the rest of stdin and the result pipe to
`worker_main` (worker/main.py). Standard library only; the daemon sends this file's text, it never
imports it.
"""
# No `from __future__ import annotations` here: compile() below inherits this file's future flags, so it would
# change how CRANE's cloudpickle copy and the worker's parts are compiled (its one annotation, None, is a constant).
import json
import os
import sys
import types


def _crane_boot() -> None:
    # The daemon's pipes (anonymous: no other process holds them) move to private descriptors: stdin brings the
    # requests (a session's commands too), stdout takes the portable run's lines (crane.sandbox.pipes); fds 0 and
    # 1 then point at the null device, so nothing a library prints before the run reaches the daemon's channel.
    commands, results = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(commands, 1 << 20)
        if not chunk:
            return
        buf += chunk
    head, _, rest = buf.partition(b"\n")
    h = json.loads(head)
    for name, doc, parts in h["modules"]:
        m = types.ModuleType(name, doc)
        m.__dict__["__file__"] = "<crane-kernel>"
        sys.modules[name] = m
        for fname, text in parts:
            exec(compile(text, fname, "exec"), m.__dict__)
    sb = sys.modules["_crane_sandbox"]
    lines = sb._Lines(commands, results)
    lines.buf = rest
    sb.worker_main(h, lines)
try:
    _crane_boot()
except BaseException:
    import traceback
    traceback.print_exc()
    os._exit(70)
os._exit(0)

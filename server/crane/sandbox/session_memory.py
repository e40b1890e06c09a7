"""Daemon side: an OS transplant session's address-space limit for each command (issue 42, h5).

The session's worker is confined once, before any of the kernel's state is copied (it comes command by command),
and its seccomp filter refuses `setrlimit` to it: its hard RLIMIT_AS stays what the session got at the start,
max(its size, the kernel's size) + the budget + 1 GiB for loads (`SandboxRequest.vm_floor_mb`). The kernel's
whole size counts every value it holds, copied or not: on a kernel holding 2 GiB the session never reads, a
command could map 2 GiB more than its budget (a fork of the kernel shares those pages and gets its budget alone).

So the daemon, which may (the worker is its own child, same user), sets the worker's *soft* limit from outside
(`prlimit`) before each run and inspect: the worker's size now — its libraries and the state copied so far —
plus the budget plus the address space the kernel reserved beyond the worker and never touched (its virtual size
less its resident size, less the worker's: pyarrow's mimalloc arenas, thread stacks, the lazy reservations
a0b81d5 gave room for), never above the hard limit; before each load it is lifted back to the hard limit (a
load's size is the kernel's values'). The one-shot run's limit is unchanged (transplant.vm_floor_mb: max(worker +
copy, kernel) + budget, as a fork's). Values the kernel holds but never touched (a `np.zeros` array) count as
reservations. Where /proc or prlimit is missing or refused, the hard limit alone holds, as before.
"""

from __future__ import annotations

import resource
from typing import NamedTuple

from crane.sandbox.channel import _starttime
from crane.sandbox.process_watch import ProcessRef
from crane.sandbox.transplant import KernelRef

MIB = 1 << 20


class VmSize(NamedTuple):
    """A process's virtual and resident sizes (bytes), from /proc/PID/status."""

    vm: int
    rss: int


def vm_of(pid: int, start: int = 0) -> VmSize | None:
    """`pid`'s sizes, or None (no such process, no /proc; `start` given: no longer that process)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return None
    if start and _starttime(pid) != start:
        return None
    got: dict[bytes, int] = {}
    for line in status.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"VmSize", b"VmRSS"):
            parts = rest.split()
            if parts and parts[0].isdigit():
                got[key] = int(parts[0]) * 1024
    if b"VmSize" not in got:
        return None
    return VmSize(got[b"VmSize"], got.get(b"VmRSS", 0))


def kernel_key(kernel: KernelRef | ProcessRef | None) -> tuple[int, int] | None:
    """The kernel's (pid, start time) where the daemon sees its process in /proc (`transplant.kernel_of`)."""
    return (kernel.pid, kernel.start) if isinstance(kernel, KernelRef) else None


def command_limit(worker: VmSize, kernel: VmSize | None, memory_mb: int) -> int:
    """A command's soft address-space limit: the worker's size + the budget + what the kernel reserved untouched
    beyond the worker (0 where the kernel is not seen)."""
    reserved = 0
    if kernel is not None:
        reserved = max(0, (kernel.vm - kernel.rss) - (worker.vm - worker.rss))
    return worker.vm + int(memory_mb) * MIB + reserved


def limit_command(pid: int, kernel: tuple[int, int] | None, memory_mb: int) -> int | None:
    """Set the worker `pid`'s soft RLIMIT_AS for its next command (`command_limit`, at most its hard limit); the
    caller's child, not reaped yet (its pid cannot be another's). The limit set, or None where it could not be (the
    hard limit holds)."""
    worker = vm_of(pid)
    if worker is None:
        return None
    seen = vm_of(*kernel) if kernel is not None else None
    try:
        _soft, hard = resource.prlimit(pid, resource.RLIMIT_AS)
        soft = command_limit(worker, seen, memory_mb)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.prlimit(pid, resource.RLIMIT_AS, (soft, hard))
    except (OSError, ValueError, AttributeError):
        return None
    return soft


def lift_for_load(pid: int) -> None:
    """The worker's soft RLIMIT_AS back to its hard limit, for a load of more of the kernel's state (the caller's
    child, not reaped yet)."""
    try:
        _soft, hard = resource.prlimit(pid, resource.RLIMIT_AS)
        resource.prlimit(pid, resource.RLIMIT_AS, (hard, hard))
    except (OSError, ValueError, AttributeError):
        pass

"""What the daemon asks of the sandbox's kernel side and of the transplant worker: one typed request.

`SandboxRequest` declares every key and its default once. The daemon encodes it whole (every field, defaults
included) as JSON; the kernel side, which has no msgspec, checks it at its edge (`sandbox/kernel/request.py`:
every declared key present with a value of its type, nothing else) and reads the fields without defaults of its
own. A test keeps the two declarations' names and types equal.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from crane.sandbox.drain import OUTPUT_LIMIT

RunMode = Literal["run", "session"]
LayerRequest = Literal["auto", "blocking"]
Channel = Literal["local", "remote"]
WorkerConfinement = Literal["os", "portable", "guard"]


class SandboxRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One fork run or session (`_crane_sandbox.start` / `.session`), or one transplant worker's run."""

    dir: str  # the daemon's private directory for this child (PrivateDir)
    scratch: str  # the one place the blocking confinement lets the cell write
    token: str  # proves the kernel sees `dir` (else the remote channel)
    mode: RunMode = "run"
    source: str = ""  # the cell (runs); empty for sessions
    budget_s: float = 10.0  # wall-clock budget of one run (a session: of each command)
    cpu_s: float | None = None  # CPU-time limit of the child; None: budget_s + 1
    memory_mb: int = 2048  # address-space budget asked for (the kernel side may lower it to what is free)
    file_mb: int = 64  # largest file the blocking confinement lets the cell write
    layer_mb: int = 2048  # size bound of the private layer's tmpfs
    output_limit: int = OUTPUT_LIMIT  # bytes of stdout/stderr kept
    layer: LayerRequest = "auto"  # "auto": the private layer where it can be built, else blocking
    places: list[str] = []  # extra writable places that get a private layer
    idle: bool = False  # background runs: idle CPU priority
    max_processes: int = 1000  # processes the run may start (the layer's pid_max)
    miniature: dict | None = None  # shrink the large values the cell reads first (crane.sandbox.scale)
    notify: str | None = None  # blocking runs: the daemon's socket for seccomp notifications (RunDrain)
    channel: Channel = "local"  # "remote": the kernel made its own directory; the daemon polls
    remote_ok: bool = True  # False: answer unavailable instead of making a directory of its own
    run_id: str | None = None  # remote channel: the handle for collect/stop
    # transplant workers: "portable" confines the worker with the platform's OS layer under the call guard and the
    # audit hook (worker/portable.py), "guard" with the guard and the hook alone, `portable_reason` says why, `os_layers` the OS layers it started under (macOS)
    confinement: WorkerConfinement = "os"
    portable_reason: str | None = None
    os_layers: list[str] = []
    # transplant workers on the OS path: the kernel's virtual size (MiB) when the run was asked for, less the values
    # the copy loads anew (a run's `memory_mb` counts them: transplant.vm_floor_mb). The worker's address-space
    # limit is then max(its own size, this) + the budget, as a fork of the kernel gets: a fresh
    # worker has not yet made the reservations its libraries make lazily (pyarrow's mimalloc arenas: 1 GiB at a
    # pandas 3 `df.drop`), which otherwise came out of the run's budget and starved TensorFlow's thread stacks
    vm_floor_mb: int = 0


def encode_request(request: SandboxRequest) -> str:
    """The request as the JSON the kernel side decodes (every field present)."""
    return msgspec.json.encode(request).decode()

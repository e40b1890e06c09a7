"""Sandbox verdicts: what a speculative run of a cell concluded, decoded and validated at the edge.

`SandboxVerdict` is what `speculate()` returns: the one record of a run, nested as it is (camelCase on the wire)
in `crane check --json` (`CellResult.sandbox`), the bench's variants, the LSP's diagnostic data and
`crane.runSpeculatively` result; the MCP tools' `SandboxRun` is made from it in one place (`crane.mcp.schemas`).
Its closed sets (`Verdict`, `RunMode`, `Scale`, ...) are the aliases every boundary shares. The sandbox child writes JSON lines
on its result channel: a `SetupLine` (the mode in force, what was made private, setup timings) before user
code, a `ChildRecord` (the outcome) at the end, and, in layered mode, the supervising process adds an
`ExitLine` (how the process that ran the cell ended). Each is decoded with msgspec; anything else is reported
as a broken sandbox.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from crane.sandbox.request import Channel

Verdict = Literal["crash", "no-crash", "timeout", "blocked", "unavailable"]
Mode = Literal["layered", "blocking"]
RunMode = Literal["layered", "blocking", "transplant", "portable"]  # portable: crane.sandbox.portable
Scale = Literal["full", "miniature"]
DisplayKind = Literal["execute_result", "display_data"]


class DisplayOutput(msgspec.Struct, omit_defaults=True, rename="camel"):
    """One output the cell displayed: `execute_result` (its last expression) or `display_data`."""

    kind: DisplayKind
    text: str = ""  # the text/plain repr (bounded)
    mimetypes: list[str] = []


class KeptObject(msgspec.Struct, omit_defaults=True, rename="camel"):
    """Miniature runs: one object of the kernel's namespace replaced by a row subset."""

    name: str  # the name (or name[key] / name.attr) in the cell's namespace
    kind: str  # DataFrame, Series, ndarray, Tensor, TensorDataset, DataLoader, ...
    rows: int  # rows kept
    of: int  # rows in the kernel's object


class TransplantInfo(msgspec.Struct, omit_defaults=True, rename="camel"):
    """Transplant runs (crane.sandbox.transplant): what was copied from the kernel into the worker process."""

    copied: list[str] = []  # "name (type)" of every name the cell reads that was copied
    bytes: int = 0  # pickled size, out-of-band buffers included
    warm: bool = False  # an idle worker with the kernel's imports done took the run
    confinement: Mode | None = None  # the worker's confinement (layered or blocking)
    export_ms: float = 0.0  # the kernel's time to write the state (the kernel is busy only for this)
    export_watch: str | None = None  # what would have stopped the export at once for a request of the user's
    # ("the kernel's shell queue"); None: only its kernel-time cap (`export_seconds`) bounded the user's wait
    devices_mapped: bool = False  # torch's cuda/mps requests ran on the CPU
    not_imported: list[str] = []  # the kernel's modules the worker could not import
    shrunk: str | None = None  # why large values were shrunk in the kernel before the copy, when the run was
    # not asked to be a miniature (the verdict's `kept` says what was kept)
    raw_bytes: int = 0  # the memory of the values the cell reads, before any shrinking
    layers: list[str] = []  # portable runs: the layers that confined it ("call guard", "audit hook", "sandbox-exec")


Writer = Literal["cell-process", "session-head"]


class Integrity(msgspec.Struct, rename="camel"):  # every field always shown
    """Which guarantees about who wrote a verdict held (docs/sandbox.md, "Who writes the verdict"), for the editor,
    the CLI and the MCP tools to show.

    writer: "session-head": a session command's reply, written by the session's head, a process in which no code of
    any command ran, from the outcome the command's own fresh process sent it (the cell never holds the daemon's
    channel); "cell-process": a one-shot run's record, written by the process that ran the cell (it holds the
    channel; what it could add there is what `channel_checked` catches). channel_checked: the channel was read to
    its end and held CRANE's lines only (one record; an extra line would have made the run `blocked`).
    fresh_state: a session command ran in a fresh fork of the session's state, which no earlier command that
    crashed, was refused or timed out has changed (None for one-shot runs, which always start from the kernel)."""

    writer: Writer = "cell-process"
    channel_checked: bool = False
    fresh_state: bool | None = None


class Refusal(msgspec.Struct, omit_defaults=True, rename="camel"):
    """What a sandbox refused, as a cause other modules read (never parsed from `reason`): the `layer` that refused
    it ("call guard", "audit hook", "landlock", ...), the `call` (or the exception the OS layer's refusal raised in
    the cell), and the `path` when one was named."""

    layer: str
    call: str
    path: str | None = None


class SandboxVerdict(msgspec.Struct, omit_defaults=True, rename="camel"):
    """The outcome of running a cell speculatively against a copy-on-write fork of the kernel.

    verdict: "crash" (certain: the real exception, line mapped to the cell), "no-crash" (ran clean within the
    budget), "timeout" (wall-clock, CPU or memory budget exhausted: inconclusive), "blocked" (the cell tried a
    side effect the sandbox refuses: file writes, network, programs, ... — inconclusive), "unavailable" (the
    sandbox could not run here: see `reason`).
    """

    verdict: Verdict
    ename: str | None = None
    evalue: str | None = None
    line: int | None = None  # 1-based line in the target cell
    traceback: list[str] = []  # short: cell frames and the last library frames, then "Ename: evalue"
    stdout: str = ""
    stderr: str = ""
    displays: list[DisplayOutput] = []
    elapsed_ms: float = 0.0  # the cell's own run time in the sandbox
    overhead_ms: float = 0.0  # everything else: request, fork, confinement, collection
    reason: str | None = None
    denied: list[str] = []  # side effects the sandbox refused (Python-level record)
    absorbed: list[str] = []  # side effects that happened only in the sandbox (a private layer, its namespaces)
    landlock_abi: int | None = None
    pid: int | None = None
    # how the verdict was reached
    mode: RunMode | None = None  # "layered": writes in private copy-on-write layers, worker processes allowed;
    mode_reason: str | None = None  # "blocking": side effects refused (why layered mode is not in force)
    scale: Scale = "full"  # "miniature": the cell ran on row subsets of its large inputs (see `kept`)
    kept: list[KeptObject] = []
    setup_ms: float = 0.0  # the child's setup before user code (part of overhead_ms)
    setup_steps: dict[str, float] = {}  # setup step -> ms (descriptors, layer, confine, ...; "cpu": CPU ms)
    fork_ms: float | None = None  # the fork in the kernel (wall clock; fork_cpu_ms: its CPU time)
    fork_cpu_ms: float | None = None
    channel: Channel | None = None  # remote: the kernel cannot see the daemon's files
    transplant: TransplantInfo | None = None  # mode "transplant": a worker process on a copy of the state
    unforkable: bool = False  # unavailable because forking this kernel is unsafe (a transplant run may do)
    # a crash whose failing frame may depend on state a transplant rebuilt (library objects, settings, anything a
    # copy can miss) is "likely", not certain: it never overrides a clean rules result (crane.policy)
    certain: bool = True
    # "unavailable" for a passing cause (the transplant export stopped for a request waiting for the kernel, or
    # by its kernel-time cap): the language server does not keep it for the cell's text and kernel state, it
    # tries again a few times (crane.lsp.transient_stops); the CLI and MCP report it as any other reason
    transient: bool = False
    integrity: Integrity | None = None  # who wrote this verdict and what was checked (see `Integrity`)
    refusal: Refusal | None = None  # a `blocked` run: which layer refused what (see `Refusal`)

    @property
    def conclusive(self) -> bool:
        return self.verdict in ("crash", "no-crash")

    @property
    def ran(self) -> bool:
        """The cell was run (in some mode, at some scale): not `unavailable`."""
        return self.verdict != "unavailable"

    def doubt(self) -> str | None:
        """Why this conclusive run is only "likely" for the kernel, in words (None: it is certain, or it decided
        nothing): a copy's crash or clean run that may rest on what the copy missed (`certain` False; `reason` says
        what), or a clean run on row subsets (a miniature: the full data may still crash). What a repair reads of
        the crash it starts from and of each fix's verification run (crane.fixes, crane.agent: issue 42, h5)."""
        if self.verdict not in ("crash", "no-crash"):
            return None
        if not self.certain:
            return self.reason or ("the crash is only likely: the copy may have missed the state it rests on"
                                   if self.verdict == "crash" else "the clean run is only likely")
        if self.verdict == "no-crash" and self.scale == "miniature":
            return "the clean run is only likely: a miniature run (" + miniature_text(self.kept) + ")"
        return None

    def how(self) -> str:
        """One line saying how the verdict was reached (for hovers, diagnoses and the CLI)."""
        if self.verdict == "unavailable":
            return f"sandbox unavailable: {self.reason or 'unknown reason'}"
        where = "a confined copy-on-write fork of the kernel"
        if self.mode in ("transplant", "portable") and self.transplant is not None:
            where = transplant_text(self.transplant, self.mode_reason)
        elif self.mode == "layered":
            where += " (file writes in a private layer, worker processes allowed)"
        elif self.mode == "blocking":
            where += " (side effects blocked" + (f": {self.mode_reason}" if self.mode_reason else "") + ")"
        text = f"ran in {where}"
        if self.scale == "miniature":
            text += "; miniature run: " + miniature_text(self.kept)
        return text


_VERDICT_WORDS = {"crash": "crashes", "no-crash": "runs without crashing", "timeout": "did not finish (inconclusive)",
                  "blocked": "has side effects the sandbox refuses (inconclusive)", "unavailable": "was not run"}


def verdict_markdown(v: SandboxVerdict) -> str:
    """How a cell's speculative run went and how its verdict was reached (one markdown line, for the hover and
    the diagnosis)."""
    if v.verdict == "unavailable":
        return f"**Speculative run**: not run ({v.reason or 'the sandbox is unavailable'})."
    head = _VERDICT_WORDS.get(v.verdict, v.verdict)
    if v.verdict == "crash" and v.ename:
        head += f" with `{v.ename}`" + (f" on line {v.line}" if v.line else "")
    doubt = v.doubt() if not v.certain else None  # a likely crash or clean run says why (issue 42, h5; a
    # miniature is said by `how()`)
    reason = f" ({v.reason})" if v.reason and v.verdict not in ("crash", "no-crash") else f" ({doubt})" if doubt else ""
    how = v.how()
    return f"**Speculative run**: this cell {head}{reason}. {how[:1].upper()}{how[1:]}."


def transplant_text(t: TransplantInfo, why: str | None) -> str:
    """How a transplant run was made (for `how()`)."""
    names = ", ".join(c.split(" (")[0] for c in t.copied[:6]) + (", ..." if len(t.copied) > 6 else "")
    confined = f"a {'guarded' if t.layers else 'confined'} {'warm' if t.warm else 'fresh'} process"
    text = (f"{confined} of the kernel's interpreter, on a copy of "
            f"{names or 'nothing from the kernel'} ({t.bytes / 1e6:.1f} MB"
            + (f"; {t.confinement} confinement" if t.confinement else "") + ")")
    if t.layers:  # the portable sandbox: say exactly which layers ran
        os_layers = [x for x in t.layers if x not in ("call guard", "audit hook")]
        text += f"; portable sandbox: {', '.join(t.layers)}" + (
            " (no OS confinement)" if not os_layers else f" (OS layer: {', '.join(os_layers)})")
    if why:
        text += f" (not forked: {why})" if not t.layers else f" ({why})"
    if t.shrunk:
        text += f"; shrunk before the copy ({t.shrunk})"
    if t.devices_mapped:  # worker/devices.py: every torch tensor keeps its (virtual) device
        return text + ("; GPUs hidden, cuda/mps requests mapped to the CPU with each tensor's device kept: torch "
                       "placement errors reproduce, GPU memory and GPU-only calls are not checked")
    return text + "; GPUs hidden: device placement not checked"


def miniature_text(kept: list[KeptObject]) -> str:
    """'kept 1,333 of 40,000 rows of X, y; 166 of 5,000 of X_test' (objects grouped by size)."""
    groups: dict[tuple[int, int], list[str]] = {}
    loops = [f"each `for` and `while` loop cut after {k.rows} iterations once it had run {k.of / 1000:g} s" for k in kept
             if k.kind == "loop"][:1]
    for k in (k for k in kept if k.kind != "loop"):
        groups.setdefault((k.rows, k.of), []).append(k.name)
    parts = [f"{rows:,} of {of:,} rows of {', '.join(names[:4])}{', ...' if len(names) > 4 else ''}"
             for (rows, of), names in sorted(groups.items(), key=lambda kv: -kv[0][1])]
    return "; ".join(([("kept " + "; ".join(parts))] if parts else []) + loops) or "nothing large to shrink"


class SetupLine(msgspec.Struct, omit_defaults=True):
    """Written by the child before user code (kernel/isolation._prepare_child)."""

    event: Literal["setup"]
    mode: Literal["layered", "blocking", "portable"]
    reason: str | None = None
    layer: dict = {}  # layered: places, readonly, pid_max, skipped
    fds: dict = {}  # inherited descriptors by treatment (kernel/fds)
    mappings: dict = {}  # shared mappings by treatment (kernel/mappings): unmapped (or readonly) > 0 matters
    pool_threads: int = 0  # native worker threads (OpenMP, BLAS, rayon) the kernel had when it forked
    user_threads: list[str] = []  # the notebook's threads running in the kernel when it forked (not in the child)
    steps: dict = {}  # setup step -> ms
    pid: int | None = None
    kept: list[KeptObject] = []  # miniature runs: what was shrunk
    transplant: dict = {}  # transplant runs (worker/main.py): warm, devices_mapped, preload_ms, not_imported


class DeniedLine(msgspec.Struct, omit_defaults=True):
    """Layered mode: written by the supervising process when any process of the sandbox (a program the cell
    started included) tried the network."""

    event: Literal["denied"]
    what: str


class ExitLine(msgspec.Struct, omit_defaults=True):
    """Layered mode: written by the supervising process when the process that ran the cell has ended."""

    event: Literal["exit"]
    exitcode: int | None = None
    signal: int | None = None
    deadline: bool = False  # it was killed at the wall-clock deadline


class ChildRecord(msgspec.Struct, omit_defaults=True):
    """The JSON line a one-shot sandbox child writes at the end (see kernel/run.run_source)."""

    verdict: Verdict
    reason: str | None = None
    elapsed_ms: float = 0.0
    setup_ms: float = 0.0
    ename: str | None = None
    evalue: str | None = None
    line: int | None = None
    traceback: list[str] = []
    displays: list[DisplayOutput] = []
    denied: list[str] = []
    absorbed: list[str] = []
    confinement: dict = {}
    refusal: Refusal | None = None
    unsettled: bool = False  # threads the cell left running past the grace (kernel/armed): a clean run only likely


class LaunchReply(msgspec.Struct, omit_defaults=True):
    """What the kernel answers to the private start request."""

    ok: bool
    pid: int | None = None
    start: int | None = None
    verdict: Verdict | None = None
    reason: str | None = None
    channel: Channel = "local"
    run_id: str | None = None  # remote channel: the handle for collect/stop
    fork_ms: float | None = None
    fork_cpu_ms: float | None = None
    unforkable: bool = False  # refused because forking this kernel is unsafe (a run elsewhere could still do)


class RemoteState(msgspec.Struct, omit_defaults=True):
    """Remote channel: what `collect(run_id)` answers."""

    done: bool
    lost: bool = False
    status: str = ""
    result: str = ""
    stdout: str = ""
    stderr: str = ""


class ExitStatus(msgspec.Struct, omit_defaults=True):
    """How a run's process ended, written into the private directory by its parent once it is reaped (the
    kernel's reaper thread; in layered mode A, for B): the cell cannot write there (docs/sandbox.md, "Who writes
    the verdict")."""

    exitcode: int | None = None
    signal: int | None = None
    sealed: list[int] | None = None  # [code, digest]: CRANE's epilogue finished, seen in /proc (kernel/common)
    checked: bool | None = None  # whether the parent could look for the seal (None: a path without one)
    by_parent: bool = False  # the parent ended it, after its seal
    deadline: bool = False  # A killed B at the wall-clock deadline
    denied: list[str] = []  # A: network attempts of the layered run's processes


child_record_decoder = msgspec.json.Decoder(ChildRecord)
exit_status_decoder = msgspec.json.Decoder(ExitStatus)


def unavailable(reason: str) -> SandboxVerdict:
    return SandboxVerdict(verdict="unavailable", reason=reason)

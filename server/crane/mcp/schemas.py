"""The MCP tools' arguments and results: msgspec Structs, decoded and validated at the edge.

`SandboxRun` is the agents' stable view of a sandbox run (their contract: `outcome`, `exception`, `blocked`, output
bounded for a model's context); it is made from the sandbox's one record (`crane.sandbox.verdict.SandboxVerdict`)
by `SandboxRun.of` alone.

Each tool's `inputSchema` and `outputSchema` (tools/list) are generated from these Structs
(`msgspec.json.schema`), so what an agent is told and what the server accepts cannot drift apart. Arguments are
decoded strictly (unknown fields refused, types checked, bounds checked); a bad argument is a tool result with
`isError` and the validation message (the model reads it and corrects the call), never a dead server.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from crane.finding import Finding
from crane.fixes.model import SearchStatus
from crane.pipeline import FactsMode
from crane.policy import DecidedBy, Outcome
from crane.probe.facts import Facts
from crane.sandbox.request import WorkerConfinement
from crane.sandbox.verdict import Integrity, SandboxVerdict, Verdict

Code = Annotated[str, msgspec.Meta(max_length=200_000, description="Python code (IPython syntax), as a cell")]
CellNumber = Annotated[int, msgspec.Meta(ge=1, le=100_000, description="1-based cell number, as in `crane check`")]
Budget = Annotated[float, msgspec.Meta(gt=0, le=600, description="seconds of wall clock the sandbox run may take "
                                                                  "(default 30)")]
SearchBudget = Annotated[float, msgspec.Meta(gt=0, le=600, description="seconds of wall clock the whole fix search "
                                                                       "may take (default 60)")]
CheckMode = Annotated[Literal["static", "auto"], msgspec.Meta(
    description="'static': CRANE's rules on the kernel's facts only (instant); 'auto' (default): also run the code "
                "in a confined copy-on-write fork of the kernel, whose real exception or clean run decides")]
Names = Annotated[list[Annotated[str, msgspec.Meta(max_length=200)]], msgspec.Meta(
    max_length=200, description="the variables to describe, e.g. [\"df\", \"model\"]; omitted: every user "
                                "variable (up to 200)")]
DefaultNotebook = Annotated[str, msgspec.Meta(
    min_length=1, max_length=4096, description="path of the .ipynb file (absolute, or relative to the server's "
                                               "working directory); omitted: the notebook `crane mcp` serves")]


class _Args(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    pass


class FactsArgs(_Args):
    names: Names | None = None


class CheckCodeArgs(_Args):
    code: Code
    mode: CheckMode = "auto"  # static: the rules on the kernel's facts; auto: a sandbox run confirms or clears
    budget_s: Budget = 30.0


class CheckCellArgs(_Args):
    cell: CellNumber
    notebook: DefaultNotebook | None = None  # omitted: the notebook given to `crane mcp --notebook`
    mode: CheckMode = "auto"
    budget_s: Budget = 30.0


class TryCodeArgs(_Args):
    code: Code
    budget_s: Budget = 30.0


class FixesArgs(_Args):
    cell: CellNumber
    notebook: DefaultNotebook | None = None
    budget_s: SearchBudget = 60.0  # the whole search


# -- results ---------------------------------------------------------------------------------------------------
class KernelFacts(msgspec.Struct, omit_defaults=True, kw_only=True):
    """What the probe read, privately and read-only (no user code ran): per variable its type, shape, dtype,
    columns, NaN counts, fitted-model attributes..."""

    facts: dict[str, Facts] = {}
    undefined: list[str] = []  # asked for, but bound neither in the namespace nor in builtins
    cwd: str | None = None
    libraries: dict[str, str] = {}
    truncated: bool = False  # the size cap cut something: ask for fewer names
    errors: list[str] = []
    elapsed_ms: float = 0.0


class SandboxRun(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One run in the sandbox: a confined copy-on-write fork of the kernel; the kernel itself never ran it."""

    outcome: Verdict
    exception: str | None = None  # "ZeroDivisionError: division by zero"
    ename: str | None = None
    evalue: str | None = None
    line: int | None = None  # 1-based line in the code
    traceback: list[str] = []
    stdout: str = ""  # bounded
    stderr: str = ""  # bounded
    stdout_truncated: bool = False
    blocked: list[str] = []  # side effects the sandbox refused (file writes, network, programs, signals, ...)
    absorbed: list[str] = []  # side effects that happened only in the sandbox (files deleted in the private layer)
    reason: str | None = None  # why timeout / blocked / unavailable
    how: str = ""  # how the outcome was reached (mode, scale)
    elapsed_ms: float = 0.0
    # which confinement ran: "os" (Linux's namespaces, Landlock, seccomp: the boundary against hostile code) or
    # "portable" (a call guard and an audit hook in a separate worker: honest side effects and mistakes only)
    confinement: WorkerConfinement | None = None
    layers: list[str] = []  # the portable run's layers ("call guard", "audit hook", "sandbox-exec")
    # who wrote the outcome and what was checked (issue 41): "session-head" (a session's head, from the command's own
    # fresh process) or "cell-process"; channel_checked: nothing but CRANE's one record on the channel; fresh_state:
    # a session command started from a state no earlier failed command changed
    integrity: Integrity | None = None
    # False: a crash (or clean run) on a copy path that is only "likely" (the copy may have missed what it rests on:
    # transplant.copy_crash_certain, one rule for one-shot runs and sessions); it never decides alone
    certain: bool = True

    @classmethod
    def of(cls, v: SandboxVerdict, limit: int | None = None) -> SandboxRun:
        """The tools' view of the sandbox's record `v` (stdout and stderr cut to `limit` characters)."""
        stdout, cut_out = bounded(v.stdout, limit or STDOUT_LIMIT)
        stderr, cut_err = bounded(v.stderr, limit or STDOUT_LIMIT)
        return cls(
            outcome=v.verdict, exception=(f"{v.ename}: {v.evalue}" if v.evalue else v.ename) if v.ename else None,
            ename=v.ename, evalue=v.evalue, line=v.line, traceback=list(v.traceback), stdout=stdout, stderr=stderr,
            stdout_truncated=cut_out or cut_err, blocked=list(v.denied), absorbed=list(v.absorbed), reason=v.reason,
            how=v.how(), elapsed_ms=round(v.elapsed_ms, 3),
            confinement=None if not v.ran and v.mode is None else ("portable" if v.mode == "portable" else "os"),
            layers=list(v.transplant.layers) if v.mode == "portable" and v.transplant is not None else [],
            integrity=v.integrity, certain=v.certain,
        )


STDOUT_LIMIT = 16 * 1024  # characters of stdout / stderr a tool result carries


def bounded(text: str, limit: int = STDOUT_LIMIT) -> tuple[str, bool]:
    """`text` cut to `limit` characters (saying how many more there were), and whether it was cut."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n... ({len(text) - limit} more characters)", True


class Prediction(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Will this code crash if run now against the kernel as it is, and why. `unknown`: neither the kernel's
    facts nor a sandbox run decided (the run timed out, was blocked or could not start; the facts could not be
    read while the kernel was busy; `--notebook`'s replay still going on): never read it as safe."""

    prediction: Outcome
    decided_by: DecidedBy
    findings: list[Finding] = []  # the predicted exception, line, message and evidence (facts used)
    cleared: list[Finding] = []  # rule findings a clean sandbox run disproved
    sandbox: SandboxRun | None = None  # auto mode: the confirming run
    facts_mode: FactsMode = "live"
    facts_error: str | None = None
    how: str = ""  # one line: how the prediction was reached
    cell: int | None = None
    notebook: str | None = None


class FixEdit(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A verified fix: the edits, each run in the sandbox from the live state without an exception."""

    title: str
    cell: int  # the target cell (1-based)
    old_source: str
    new_source: str
    run_first: list[int] = []  # cells to run before the target (1-based)
    other_cells: dict[str, str] = {}  # other cells the fix edits: "N" -> new source
    diff: str = ""
    verified_in: str = ""  # "fork" ("transplant" / "portable": a copy of the kernel's state), "fork-layered", "replay"
    stdout: str = ""
    # "verified"; "verified against a likely crash" (the crash it repairs was seen only on a copy of the kernel's
    # state that may have missed what it rests on: the kernel may not raise it), "verified by a likely clean run"
    # (the fix's run was a miniature, or a copy's that may have missed a finalizer) (issue 42, h5)
    verification: str = ""  # (set on every fix)
    run_certain: bool = True  # False: the fix's clean run is only likely (`run_doubt` says why)
    run_doubt: str = ""


class Fixes(msgspec.Struct, omit_defaults=True, kw_only=True):
    status: SearchStatus  # fixed, not-fixed, clean (the cell does not crash), unverifiable (no sandbox)
    cell: int
    notebook: str
    crash: str | None = None
    # the crash seen in the sandbox is certain for the kernel (None: no crash seen); False: only "likely" (seen on a
    # copy of the kernel's state that may have missed what it rests on, `crash_doubt` says why): every fix is then
    # "verified against a likely crash" (issue 42, h5)
    crash_certain: bool | None = None
    crash_doubt: str = ""
    fixes: list[FixEdit] = []
    tried: int = 0
    reason: str = ""
    elapsed_s: float = 0.0

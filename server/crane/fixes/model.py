"""What verified quick fixes are made of: the crash being repaired, candidate edits, verified fixes.

A `Candidate` is a proposed change to one target cell: a new source for the target (equal to the old one when
the fix needs no code change) and cells to run first, in order. A `VerifiedFix` is a candidate that ran
without an exception in the sandbox against the live state (the cells it says to run first, then the edited
target). Both are msgspec Structs (camelCase on the wire, in CLI JSON and LSP payloads).
"""

from __future__ import annotations

from typing import Literal

import msgspec

CrashSource = Literal["sandbox", "rules", "recorded"]
SearchStatus = Literal["fixed", "not-fixed", "clean", "unverifiable"]


class Crash(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True):
    """The exception a target cell raises (seen in the sandbox), with the line it came from."""

    ename: str
    evalue: str = ""
    line: int | None = None  # 1-based line of the cell's own frame
    traceback: list[str] = []

    @property
    def text(self) -> str:
        return f"{self.ename}: {self.evalue}" if self.evalue else self.ename


class Candidate(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True):
    """One proposed repair of the target cell.

    `source`: the target's new source (the old one when only `run_first` changes anything). `run_first`: cells
    (1-based notebook numbers) to run, in order, before the target. `cell_edits`: new sources of other cells
    (a function the target calls, defined in cell K, is where it fails) — those cells are in `run_first` (they
    are run again, edited). `kind` names the generator family (e.g. "nearest-column", "run-first"); `cost`
    orders candidates (smaller change first)."""

    kind: str
    title: str  # "Use column 'Total_Gross'" (the UI adds "(tested)" once verified)
    source: str
    run_first: tuple[int, ...] = ()
    cell_edits: tuple[tuple[int, str], ...] = ()  # (cell, new source) of other cells
    cost: float = 0.0
    detail: str = ""  # why this candidate: the fact it comes from
    depth: int = 1  # 1: from the original crash; 2+: built on another candidate's new crash
    to_code: tuple[int, ...] = ()  # raw cells the fix makes code cells (they are in run_first)
    fresh: bool = False  # verified only in a fresh replay of the written notebook (the live state cannot show it:
    # the cause is a binding the fix removes, e.g. a builtin a cell overwrote)

    @property
    def key(self) -> tuple:
        return (self.source, self.run_first, self.cell_edits, self.to_code)


class CellChange(msgspec.Struct, rename="camel", frozen=True):
    """Another cell's source before and after a fix."""

    cell: int
    old: str
    new: str


class VerifiedFix(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True):
    """A candidate that ran clean in the sandbox: the run-first cells, then the edited target."""

    kind: str
    title: str
    target: int
    old: str  # the target's source the fix was made for
    new: str  # the target's new source (== old: no code change)
    run_first: tuple[int, ...] = ()
    run_first_sources: tuple[str, ...] = ()  # the sources of the run-first cells as verified (edited ones edited)
    cell_edits: tuple[CellChange, ...] = ()  # other cells the fix edits (they are in run_first)
    to_code: tuple[int, ...] = ()  # raw cells the fix makes code cells (they are in run_first)
    detail: str = ""
    cost: float = 0.0
    sandbox: str = "fork"  # where it was verified: "fork" (a session of the kernel; "transplant" / "portable" where
    # the kernel cannot be forked: a session on a copy of its state), "fork-layered" (a fork with a
    # private copy-on-write layer: the cells write files or start programs), "replay" (a kernel replaying the history),
    # "fresh" (a new kernel replaying the written notebook: its history with the fix's edits, then the target);
    # "+fresh": verified in the sandbox, then checked again that way (the fix moves cells of the history)
    elapsed_s: float = 0.0  # time from the start of the search until this fix was verified
    stdout: str = ""  # what the verified run printed (bounded)
    # issue 42 (h5): the crash this fix was verified against is only "likely" for the user's kernel (seen on a copy
    # of its state that may have missed what it rests on: `crash_doubt` says why; the kernel may not raise it), and
    # the fix's own clean run is only likely (a copy's run that may have missed a finalizer, a miniature: `run_doubt`)
    crash_certain: bool = True
    crash_doubt: str = ""
    run_certain: bool = True
    run_doubt: str = ""

    @property
    def changes_code(self) -> bool:
        return self.new != self.old or bool(self.cell_edits)

    @property
    def verification(self) -> str:
        """The words "verified", or what the fix was verified against and by when either is only likely."""
        return verification_words(self.crash_certain, self.run_certain)

    @property
    def label(self) -> str:
        if self.crash_certain and self.run_certain:
            return f"{self.title} (tested)"
        return f"{self.title} ({self.verification.replace('verified', 'tested', 1)})"


def verification_words(crash_certain: bool | None, run_certain: bool = True) -> str:
    """How a fix was verified, in words: "verified" against a crash and by a clean run both certain; "verified
    against a likely crash" (the crash was seen on a copy of the kernel's state that may have missed what it rests
    on), "verified by a likely clean run" (the fix's run was a miniature, or a copy's that may have missed a
    finalizer), or both. One wording for the CLI, the agent, the editor and the MCP tools (issue 42, h5)."""
    parts = (["against a likely crash"] if crash_certain is False else []) + \
        ([] if run_certain else ["by a likely clean run"])
    return " ".join(["verified", ", ".join(parts)]) if parts else "verified"


class Attempt(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True):
    """One candidate run in the sandbox."""

    kind: str
    title: str
    status: str  # ok | error | timeout | blocked | unavailable
    error: str = ""  # "Ename: evalue" (first line), and where when it was a cell run first
    depth: int = 1


class SearchReport(msgspec.Struct, rename="camel", omit_defaults=True):
    """The outcome of one search: the crash, the verified fixes (at most three, smallest change first) and
    what was tried."""

    target: int
    status: SearchStatus  # fixed: ≥ 1 verified fix; clean: the cell does not crash; unverifiable: no sandbox
    crash: Crash | None = None
    fixes: list[VerifiedFix] = []
    tried: int = 0  # candidates run in the sandbox
    refused: list[str] = []  # candidates the anti-hack guard refused ("kind: reason")
    attempts: list[Attempt] = []  # every candidate run, in order

    @property
    def failed(self) -> list[str]:
        return [f"{a.title}: {a.error or a.status}" for a in self.attempts if a.status != "ok"]
    origin: list[str] = []  # where the failing line's values were made and changed (crane.analysis.provenance)
    reason: str = ""  # why there is no fix / no verification
    elapsed_s: float = 0.0
    first_fix_s: float | None = None  # time until the first verified fix
    sandbox: str = ""
    # the crash seen in the sandbox (None: none was seen): True when certain for the user's kernel; False when only
    # "likely" (a copy of the state that may have missed what it rests on: `crash_doubt` says why). The search goes
    # on, and every fix says it was verified against a likely crash (issue 42, h5)
    crash_certain: bool | None = None
    crash_doubt: str = ""

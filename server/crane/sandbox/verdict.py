"""Sandbox verdicts: what a speculative run of a cell concluded, decoded and validated at the edge.

`SandboxVerdict` is what `speculate()` returns and what the CLI/LSP show. `ChildRecord` is the JSON line the
sandbox child writes to its FIFO (decoded with msgspec; anything else is reported as a broken sandbox).
"""

from __future__ import annotations

from typing import Literal

import msgspec

Verdict = Literal["crash", "no-crash", "timeout", "blocked", "unavailable"]


class DisplayOutput(msgspec.Struct, omit_defaults=True):
    """One output the cell displayed: `execute_result` (its last expression) or `display_data`."""

    kind: Literal["execute_result", "display_data"]
    text: str = ""  # the text/plain repr (bounded)
    mimetypes: list[str] = []


class SandboxVerdict(msgspec.Struct, omit_defaults=True):
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
    landlock_abi: int | None = None
    pid: int | None = None

    @property
    def conclusive(self) -> bool:
        return self.verdict in ("crash", "no-crash")


class ChildRecord(msgspec.Struct, omit_defaults=True):
    """The JSON line a one-shot sandbox child writes (see ks_run.run_source)."""

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
    confinement: dict = {}


class LaunchReply(msgspec.Struct, omit_defaults=True):
    """What the kernel answers to the private start request."""

    ok: bool
    pid: int | None = None
    start: int | None = None
    verdict: Verdict | None = None
    reason: str | None = None


class ExitStatus(msgspec.Struct, omit_defaults=True):
    """Written by the kernel's reaper thread when the child has been reaped."""

    exitcode: int | None = None
    signal: int | None = None


child_record_decoder = msgspec.json.Decoder(ChildRecord)
exit_status_decoder = msgspec.json.Decoder(ExitStatus)
verdict_encoder = msgspec.json.Encoder()


def unavailable(reason: str) -> SandboxVerdict:
    return SandboxVerdict(verdict="unavailable", reason=reason)

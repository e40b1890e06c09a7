"""Speculative sandboxed runs: run a cell against a copy-on-write fork of the live kernel, confined.

`speculate(conn, source, budget_s)` -> SandboxVerdict (fork_runner.py); `speculate_async` for the LSP daemon;
`SandboxSession` for the repair agent (fork_session.py); `speculate_in_fresh_kernel` where fork is impossible
(fresh_kernel.py). See docs/sandbox.md.
"""

from crane.sandbox.fork_runner import speculate, speculate_async
from crane.sandbox.verdict import DisplayOutput, SandboxVerdict

__all__ = ["speculate", "speculate_async", "SandboxVerdict", "DisplayOutput"]

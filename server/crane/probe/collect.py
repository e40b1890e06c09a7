"""Daemon side of the runtime-facts probe: install it in a kernel, ask it about a target cell, decode the answer.

The probe's kernel-side parts (the stdlib-only files of `probe/kernel/`) are one private kernel module,
`_crane_probe` (see `crane.kernel.private_module`: installed once per kernel through a silent request, binds no
name in the user's namespace, reinstalled when a restart or another CRANE replaced it). Every call is one silent
request whose only expression is `_crane_probe.run('<request JSON>')`: no code runs through the cell machinery,
so the execution count, `In`/`Out` and the outputs other clients see are untouched (iopub carries only
busy/idle).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelError
from crane.kernel.private_module import KernelModule, ModuleClient, Seal
from crane.probe.facts import RESUME_ROUNDS, ProbeRequest, ProbeResult, decode_probe_result

PROBE_PARTS = (
    "common.py", "cache.py", "scan.py", "data.py", "frame.py", "ml.py", "dl.py", "checks.py", "entry.py",
)  # fmt: skip  (in probe/kernel/, in execution order)
PROBE_MODULE = KernelModule(
    "_crane_probe",
    "CRANE's private runtime-facts probe (not part of the notebook)",
    [Path(__file__).parents[1] / "kernel_common" / "ipython_shell.py"]
    + [Path(__file__).parent / "kernel" / part for part in PROBE_PARTS],
)
MODULE_NAME = PROBE_MODULE.name


class ProbeError(KernelError):
    """The probe could not be installed or run, or its answer did not decode."""


def probe_version() -> str:
    return PROBE_MODULE.version


class ProbeClient:
    """Runs the probe in one kernel through a KernelConnection, privately and with timeouts."""

    def __init__(self, conn: KernelConnection):
        self.conn = conn
        self._module = ModuleClient(conn, PROBE_MODULE, ProbeError)
        self.last_roundtrip_ms = 0.0

    @property
    def installs(self) -> int:
        """How many times this client (re)installed the probe: a rise means the kernel restarted."""
        return self._module.installs

    @property
    def seal(self) -> Seal | None:
        """The seal of the probe module this process installed in the kernel (None: none yet; its addresses): what
        a call in a fork of the kernel names (kernel/private_module.py)."""
        return self._module.address

    def ensure_installed(self, timeout: float = 10.0) -> None:
        """Install (or replace) the probe module in the kernel, privately; check that our version answers."""
        self._module.ensure_installed(timeout)

    def _call(self, function: str, args: tuple, timeout: float, what: str):
        start = time.perf_counter()
        value = self._module.call(function, *args, timeout=timeout, what=what)
        self.last_roundtrip_ms = (time.perf_counter() - start) * 1000.0
        return value

    def run(self, request: ProbeRequest, timeout: float = 2.0, complete: bool = True) -> ProbeResult:
        """Ask the probe about one target cell. Raises KernelTimeout / KernelDead / ProbeError (`timeout`: per
        request). `complete`: while the answer is `resumable` (exact passes over large values left unfinished),
        ask again — each request goes on with them — RESUME_ROUNDS times at most; else one request."""
        payload = msgspec.json.encode(request).decode("utf-8")
        result = self._run_once(payload, timeout)
        for _ in range(RESUME_ROUNDS if complete else 0):
            if not result.resumable:
                break
            result = self._run_once(payload, timeout)
        return result

    def _run_once(self, payload: str, timeout: float) -> ProbeResult:
        text = self._call("run", (payload,), timeout, "runtime-facts probe")
        if not isinstance(text, str):
            raise ProbeError(f"runtime-facts probe: expected JSON text, got {type(text).__name__}")
        try:
            return decode_probe_result(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProbeError(f"runtime-facts probe: malformed result ({exc})") from None

    def read_notebook_path(self, timeout: float = 2.0) -> str | None:
        """The notebook file VS Code's Jupyter extension records in the kernel (`__vsc_ipynb_file__`), if any."""
        from crane.kernel.client import literal_value
        from crane.kernel.identity import NOTEBOOK_PATH_EXPR

        what = "reading the notebook path"
        out = self._module.evaluate({"p": NOTEBOOK_PATH_EXPR}, timeout, what)  # reads no name of the notebook's
        value = literal_value(out.get("p"), what, ProbeError)
        return value if isinstance(value, str) else None

    def history(self, limit: int = 500, max_chars: int = 262144, timeout: float = 5.0) -> list[tuple[int, str]]:
        """The kernel's stored cell sources [(execution_count, source)], newest kept first, bounded."""
        text = self._call("history", (int(limit), int(max_chars)), timeout, "reading the kernel history")
        try:
            rows = json.loads(text)
            return [(int(n), str(src)) for n, src in rows]
        except (TypeError, ValueError) as exc:
            raise ProbeError(f"reading the kernel history: malformed result ({exc})") from None

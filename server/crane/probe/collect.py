"""Daemon side of the runtime-facts probe: install it in a kernel, ask it about a target cell, decode the answer.

The probe's source (the stdlib-only `kp_*.py` parts and `kernel_probe.py`, concatenated) is sent once per kernel
through a silent request's `user_expressions`, as `exec(<bootstrap>, {fresh dict})`: it creates the module
`_crane_probe` in `sys.modules` and binds no name in the user's namespace. Every later call is one silent request
whose only expression is `_crane_probe.run('<request JSON>')`: no code runs through the cell machinery, so the
execution count, `In`/`Out` and the outputs other clients see are untouched (iopub carries only busy/idle).
When the module is missing or has another version (the kernel restarted, or another CRANE installed it), the
call answers a sentinel and the client reinstalls once.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import msgspec

from crane.kernel.client import KernelConnection
from crane.kernel.errors import KernelDead, KernelError, KernelTimeout
from crane.probe.facts import ProbeRequest, ProbeResult, decode_probe_result

MODULE_NAME = "_crane_probe"
PROBE_PARTS = ("kp_common.py", "kp_data.py", "kp_ml.py", "kp_checks.py", "kernel_probe.py")
STRIP_MARK = "# probe: strip"
MISSING = "__crane_probe_missing__"

_BOOTSTRAP = """
import sys as _sys, types as _types
_m = _types.ModuleType(NAME, "CRANE's private runtime-facts probe (not part of the notebook)")
_m.__dict__["__file__"] = "<crane-probe>"
exec(compile(SRC, "<crane-probe>", "exec"), _m.__dict__)
_m.VERSION = VER
_sys.modules[NAME] = _m
"""


class ProbeError(KernelError):
    """The probe could not be installed or run, or its answer did not decode."""


@functools.cache
def probe_source() -> str:
    """The kernel-side probe as one stdlib-only module source (the parts in order, import lines stripped)."""
    here = Path(__file__).parent
    chunks = []
    for part in PROBE_PARTS:
        text = (here / part).read_text(encoding="utf-8")
        lines = [ln for ln in text.splitlines() if not ln.rstrip().endswith(STRIP_MARK)]
        chunks.append(f"# ---- {part} ----\n" + "\n".join(lines))
    return "\n\n".join(chunks) + "\n"


@functools.cache
def probe_version() -> str:
    return hashlib.sha1(probe_source().encode("utf-8")).hexdigest()[:16]


def install_expression() -> str:
    env = {"SRC": probe_source(), "VER": probe_version(), "NAME": MODULE_NAME}
    return f"exec({_BOOTSTRAP!r}, {env!r})"


def call_expression(function: str, *args: Any) -> str:
    """`_crane_probe.<function>(*args)` when the installed probe has our version, else the MISSING sentinel."""
    arglist = ", ".join(repr(a) for a in args)
    return (
        f"(lambda m: m.{function}({arglist}) if getattr(m, 'VERSION', None) == {probe_version()!r} "
        f"else {MISSING!r})(__import__('sys').modules.get({MODULE_NAME!r}))"
    )


def _text_value(result: dict[str, Any] | None, what: str) -> Any:
    """The Python literal a user_expressions entry evaluated to, or ProbeError with the kernel's error."""
    if not result:
        raise ProbeError(f"{what}: the kernel returned no result")
    if result.get("status") != "ok":
        raise ProbeError(f"{what} failed in the kernel: {result.get('ename', 'Error')}: {result.get('evalue', '')}")
    text = result.get("data", {}).get("text/plain", "")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ProbeError(f"{what}: unreadable reply from the kernel ({exc}): {text[:200]!r}") from None


class ProbeClient:
    """Runs the probe in one kernel through a KernelConnection, privately and with timeouts."""

    def __init__(self, conn: KernelConnection):
        self.conn = conn
        self.installs = 0  # how many times the probe was (re)installed by this client
        self.last_roundtrip_ms = 0.0

    # -- plumbing -------------------------------------------------------------------------------------------------
    def _eval(self, expressions: dict[str, str], timeout: float, what: str) -> dict[str, Any]:
        try:
            reply = self.conn.private(expressions, timeout=timeout)
        except KernelTimeout as exc:
            raise KernelTimeout(
                f"{what}: no reply within {timeout:g} s (the kernel is busy running a cell, or stuck)"
            ) from exc
        except KernelDead as exc:
            raise KernelDead(f"{what}: the kernel died ({exc})") from exc
        if reply.status != "ok":
            raise ProbeError(f"{what}: the kernel answered {reply.status}: {reply.ename}: {reply.evalue}")
        return reply.user_expressions

    def _call(self, function: str, args: tuple, timeout: float, what: str) -> Any:
        for attempt in (0, 1):
            start = time.perf_counter()
            out = self._eval({"r": call_expression(function, *args)}, timeout, what)
            self.last_roundtrip_ms = (time.perf_counter() - start) * 1000.0
            value = _text_value(out.get("r"), what)
            if value != MISSING:
                return value
            if attempt:
                raise ProbeError(f"{what}: the probe module vanished right after it was installed")
            self.ensure_installed(timeout=max(timeout, 10.0))
        raise AssertionError("unreachable")

    # -- API ------------------------------------------------------------------------------------------------------
    def ensure_installed(self, timeout: float = 10.0) -> None:
        """Install (or replace) the probe module in the kernel, privately; check that our version answers."""
        version_expr = f"getattr(__import__('sys').modules.get({MODULE_NAME!r}), 'VERSION', None)"
        out = self._eval(
            {"install": install_expression(), "version": version_expr}, timeout, "installing the probe"
        )
        _text_value(out.get("install"), "installing the probe")
        version = _text_value(out.get("version"), "installing the probe")
        if version != probe_version():
            raise ProbeError(
                f"installing the probe: the kernel reports version {version!r}, expected {probe_version()!r}"
            )
        self.installs += 1

    def run(self, request: ProbeRequest, timeout: float = 2.0) -> ProbeResult:
        """Ask the probe about one target cell. Raises KernelTimeout / KernelDead / ProbeError."""
        payload = msgspec.json.encode(request).decode("utf-8")
        text = self._call("run", (payload,), timeout, "runtime-facts probe")
        if not isinstance(text, str):
            raise ProbeError(f"runtime-facts probe: expected JSON text, got {type(text).__name__}")
        try:
            return decode_probe_result(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProbeError(f"runtime-facts probe: malformed result ({exc})") from None

    def read_notebook_path(self, timeout: float = 2.0) -> str | None:
        """The notebook file VS Code's Jupyter extension records in the kernel (`__vsc_ipynb_file__`), if any."""
        out = self._eval({"p": "globals().get('__vsc_ipynb_file__')"}, timeout, "reading the notebook path")
        value = _text_value(out.get("p"), "reading the notebook path")
        return value if isinstance(value, str) else None

    def history(self, limit: int = 500, max_chars: int = 262144, timeout: float = 5.0) -> list[tuple[int, str]]:
        """The kernel's stored cell sources [(execution_count, source)], newest kept first, bounded."""
        text = self._call("history", (int(limit), int(max_chars)), timeout, "reading the kernel history")
        try:
            rows = json.loads(text)
            return [(int(n), str(src)) for n, src in rows]
        except (TypeError, ValueError) as exc:
            raise ProbeError(f"reading the kernel history: malformed result ({exc})") from None

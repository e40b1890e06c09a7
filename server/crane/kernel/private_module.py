"""Private kernel-side modules: stdlib-only source bundles CRANE installs in a kernel and calls privately.

The runtime-facts probe (`crane.probe`) and the fork sandbox (`crane.sandbox`) each run code INSIDE the user's
kernel, where CRANE is not installed. A `KernelModule` is such a bundle: source files in order, compiled one by
one into the same fresh module object, registered as `sys.modules[name]` with `VERSION` (a hash of the sources).
It binds no name in the user's namespace and runs no user code.

Both directions go through one silent request (`silent=True, store_history=False`) and its `user_expressions`:
the execution count, `In`/`Out` and the outputs other clients see are untouched (iopub carries busy/idle only).

- install: `exec(<bootstrap>, {fresh dict})` creates the module (sources compiled under `<crane-kernel/PATH>`
  names, so kernel-side tracebacks point at the real file and line), the user's profile/trace hooks off
  meanwhile (the module's top-level code is CRANE's);
- call: `<module>.<function>(*args)` when the installed module has our VERSION, else a sentinel; on the sentinel
  (the kernel restarted, or another CRANE installed another version) `ModuleClient` installs and calls again once.

Cross-part imports in the sources (`from crane.probe.kernel.common import x  # kernel: strip`) keep the parts
importable and type-checked in the daemon; each such line is blanked before sending (line numbers stay true).
Every reply is a Python literal (`repr` of builtins), decoded by `client.literal_value` (`ast.literal_eval`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crane.kernel.client import KernelConnection, literal_value
from crane.kernel.errors import KernelDead, KernelError, KernelTimeout

STRIP_MARK = "# kernel: strip"
_PACKAGE = Path(__file__).resolve().parents[1]  # server/crane
MISSING = "__crane_module_missing__"

_BOOTSTRAP = """
import sys as _sys, types as _types
_hooks = (_sys.getprofile(), _sys.gettrace())
_sys.setprofile(None)
_sys.settrace(None)
try:
    _m = _types.ModuleType(NAME, DOC)
    _m.__dict__["__file__"] = "<crane-kernel>"
    for _f, _c in SRC:
        exec(compile(_c, _f, "exec"), _m.__dict__)
    _m.VERSION = VER
    _sys.modules[NAME] = _m
finally:
    _sys.settrace(_hooks[1])
    _sys.setprofile(_hooks[0])
"""


class KernelModuleError(KernelError):
    """A private kernel-side module could not be installed or called, or its answer did not decode."""


def strip_marked(text: str) -> str:
    """The part's text with the `# kernel: strip` lines blanked (so line numbers stay the file's own); a marked
    line that opens a parenthesised import is blanked through its closing parenthesis."""
    out = []
    in_import = False
    for ln in text.splitlines():
        if in_import:
            out.append("")
            in_import = ")" not in ln.split("#", 1)[0]
        elif ln.rstrip().endswith(STRIP_MARK):
            out.append("")
            code = ln.split("#", 1)[0]
            in_import = code.count("(") > code.count(")")
        else:
            out.append(ln)
    return "\n".join(out) + "\n"


def _shown_path(path: Path) -> str:
    """A part's name in kernel-side tracebacks: its path inside the crane package (`sandbox/kernel/run.py`), so
    two folders' parts of the same file name stay apart; the file name for a part from elsewhere (cloudpickle)."""
    try:
        return path.resolve().relative_to(_PACKAGE).as_posix()
    except ValueError:
        return path.name


class KernelModule:
    """A bundle of stdlib-only source files installed in a kernel as `sys.modules[name]`."""

    def __init__(self, name: str, doc: str, files: Sequence[Path]):
        self.name = name
        self.doc = doc
        self.files = tuple(files)

    @functools.cached_property
    def sources(self) -> tuple[tuple[str, str], ...]:
        """(filename for tracebacks, text) of every part, in execution order."""
        return tuple((f"<crane-kernel/{_shown_path(p)}>", strip_marked(p.read_text(encoding="utf-8"))) for p in self.files)

    @functools.cached_property
    def version(self) -> str:
        digest = hashlib.sha1()
        for filename, text in self.sources:
            digest.update(filename.encode() + b"\0" + text.encode("utf-8") + b"\0")
        return digest.hexdigest()[:16]

    def install_expression(self) -> str:
        env = {"SRC": self.sources, "VER": self.version, "NAME": self.name, "DOC": self.doc}
        return f"exec({_BOOTSTRAP!r}, {env!r})"

    def version_expression(self) -> str:
        return f"getattr(__import__('sys').modules.get({self.name!r}), 'VERSION', None)"

    def call_expression(self, function: str, *args: Any) -> str:
        """`<module>.<function>(*args)` when the installed module has our version, else the MISSING sentinel.
        Arguments must be Python literals (their `repr` is sent)."""
        arglist = ", ".join(repr(a) for a in args)
        return (
            f"(lambda m: m.{function}({arglist}) if getattr(m, 'VERSION', None) == {self.version!r} "
            f"else {MISSING!r})(__import__('sys').modules.get({self.name!r}))"
        )


class ModuleClient:
    """Calls one `KernelModule` in one kernel through a `KernelConnection`, installing it when needed."""

    def __init__(self, conn: KernelConnection, module: KernelModule, error: type[KernelError] = KernelModuleError):
        self.conn = conn
        self.module = module
        self.error = error
        self.installs = 0  # how many times this client (re)installed the module: a rise means a fresh kernel

    def evaluate(self, expressions: dict[str, str], timeout: float, what: str) -> dict[str, Any]:
        """Evaluate `expressions` in one private request; the raw `user_expressions` entries."""
        try:
            reply = self.conn.private(expressions, timeout=timeout)
        except KernelTimeout as exc:
            raise KernelTimeout(
                f"{what}: no reply within {timeout:g} s (the kernel is busy running a cell, or stuck)"
            ) from exc
        except KernelDead as exc:
            raise KernelDead(f"{what}: the kernel died ({exc})") from exc
        if reply.status != "ok":
            raise self.error(f"{what}: the kernel answered {reply.status}: {reply.ename}: {reply.evalue}")
        return reply.user_expressions

    def ensure_installed(self, timeout: float = 10.0) -> None:
        """Install (or replace) the module in the kernel, privately; check that our version answers."""
        what = f"installing {self.module.name}"
        out = self.evaluate(
            {"install": self.module.install_expression(), "version": self.module.version_expression()}, timeout, what
        )
        literal_value(out.get("install"), what, self.error)
        version = literal_value(out.get("version"), what, self.error)
        if version != self.module.version:
            raise self.error(f"{what}: the kernel reports version {version!r}, expected {self.module.version!r}")
        self.installs += 1

    def call(self, function: str, *args: Any, timeout: float, what: str) -> Any:
        """`<module>.<function>(*args)` in the kernel, privately; its literal result."""
        for attempt in (0, 1):
            out = self.evaluate({"r": self.module.call_expression(function, *args)}, timeout, what)
            value = literal_value(out.get("r"), what, self.error)
            if value != MISSING:
                return value
            if attempt:
                raise self.error(f"{what}: the module {self.module.name} vanished right after it was installed")
            self.ensure_installed(timeout=max(timeout, 10.0))
        raise AssertionError("unreachable")

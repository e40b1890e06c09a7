"""The sandbox's options, resolved once at the edge and passed down (issue 34's part of it: `confinement`).

`SandboxOptions` is filled where a process starts (the CLI's `--sandbox` flag: `add_confinement_argument` /
`options_from_args`; the language server's `crane.sandbox` setting; `crane mcp`'s flag) and installed with
`configure`; `speculate` takes it explicitly (`sandbox=`) or reads `active()` when a run starts. Nothing below the
entry points reads an environment variable for it.
"""

from __future__ import annotations

import argparse
import threading
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Confinement = Literal["auto", "os", "portable"]
CONFINEMENT_DESCRIPTIONS = [
    "The OS sandbox where it runs (Linux x86_64: namespaces, Landlock, seccomp), else the portable one (macOS, "
    "Windows, Linux on ARM, Linux that refuses namespaces).",
    "Only the OS sandbox: where it cannot run, cells get no speculative run.",
    "The portable sandbox everywhere: the cell runs in a separate worker of the kernel's interpreter on a copy of "
    "the values it reads, confined by a call guard and an audit hook (no OS help). It keeps a notebook's honest side "
    "effects and an agent's mistakes from the disk, the network and other processes; code written to escape a "
    "Python sandbox is not in its threat model.",
]


class SandboxOptions(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a sandbox run does (the defaults are the product's)."""

    confinement: Annotated[
        Confinement,
        Meta(extra_json_schema={
            "markdownDescription": "Which sandbox runs a cell speculatively. Changes which platforms get verdicts "
                                   "from a real run.",
            "enumDescriptions": CONFINEMENT_DESCRIPTIONS,
        }),
    ] = "auto"


_lock = threading.Lock()
_active = SandboxOptions()


def configure(options: SandboxOptions) -> None:
    """Install the options this process resolved at its edge (the CLI's flags, the editor's settings)."""
    global _active
    with _lock:
        _active = options


def active() -> SandboxOptions:
    """The options runs started now use (when none are passed explicitly)."""
    return _active


def add_confinement_argument(parser: argparse.ArgumentParser) -> None:
    """`--sandbox auto|os|portable` (check, bench, fix --offline, mcp)."""
    parser.add_argument("--sandbox", dest="sandbox_confinement", choices=("auto", "os", "portable"), default="auto",
                        help="which sandbox runs cells: os (Linux's namespaces, Landlock, seccomp), portable (a "
                             "call guard and an audit hook in a separate worker, as on macOS and Windows), auto "
                             "(default: os where it runs, else portable)")


def options_from_args(args: argparse.Namespace) -> SandboxOptions:
    """The options the flags say."""
    return SandboxOptions(confinement=getattr(args, "sandbox_confinement", None) or "auto")

"""The sandbox's options: every knob that changes a verdict or a run, declared once, resolved at the edge.

`SandboxOptions` is filled once where a process starts (the CLI's flags: `add_sandbox_arguments` /
`options_from_args`; the language server's settings: `crane.sandbox` (the confinement) and `crane.speculative.*`,
whose section extends `RunOptions`; `crane mcp`'s flags) and installed with `configure`; `speculate` takes it
explicitly (`sandbox=`) or reads `active()` when a run starts. Nothing below the entry points reads an
environment variable or parses a value.
"""

from __future__ import annotations

import argparse
import threading
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

LayerChoice = Literal["auto", "layered", "blocking"]
Confinement = Literal["auto", "os", "portable", "guard"]
CONFINEMENT_DESCRIPTIONS = [
    "The OS sandbox where it runs (Linux x86_64: namespaces, Landlock, seccomp), else the portable one where this "
    "platform's OS layer can confine it (macOS, Windows, Linux on ARM, Linux that refuses namespaces); where "
    "neither can, no speculative run: the rules decide, and the diagnostic says why.",
    "Only the OS sandbox: where it cannot run, cells get no speculative run.",
    "The portable sandbox everywhere: the cell runs in a separate worker of the kernel's interpreter on a copy of "
    "the values it reads, confined by the platform's OS layer (Linux: Landlock; macOS: Seatbelt; Windows: a job "
    "object and a low-integrity token) under a call guard and an audit hook. Where no OS layer can be set up, no "
    "run.",
    "The call guard and the audit hook alone, in the portable sandbox's worker (no OS layer): opt-in. It keeps a "
    "notebook's honest side effects and an agent's mistakes from the disk, the network and other processes; code "
    "written to escape a Python sandbox is not in its threat model.",
]


# The confinement as a setting (`--sandbox`, the editor's top-level `crane.sandbox`), declared once.
ConfinementSetting = Annotated[
    Confinement,
    Meta(extra_json_schema={
        "markdownDescription": "Which sandbox runs cells speculatively: `os` (Linux x86_64's namespaces, Landlock and "
                               "seccomp), `portable` (a separate worker of the kernel's interpreter confined by the "
                               "platform's OS layer under a call guard and an audit hook, as on macOS and Windows), "
                               "`guard` (the call guard and the audit hook alone, opt-in), or `auto` (the OS sandbox "
                               "where it runs, else the portable one where an OS layer can confine it).",
        "enumDescriptions": CONFINEMENT_DESCRIPTIONS,
    }),
]


class RunOptions(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """How a sandbox run is made (the defaults are the product's); the LSP settings' `crane.speculative` section
    extends it, so the names, defaults, bounds and descriptions below are the settings' own."""

    layer: Annotated[
        LayerChoice,
        Meta(extra_json_schema={
            "markdownDescription": "How a forked sandbox confines a cell's writes. Changes verdicts of cells that "
                                   "write files.",
            "enumDescriptions": [
                "A private copy-on-write layer over the writable places where the machine allows it (the cell "
                "sees its own writes), else blocking.",
                "Always the private layer (a run that cannot build it says so).",
                "Never the layer: the cell's writes outside its scratch folder are refused (the run is then "
                "`blocked`).",
            ],
        }),
    ] = "auto"
    transplant: Annotated[
        bool,
        Meta(description="Where the kernel cannot be forked (TensorFlow, JAX, CUDA loaded), run the cell in a "
                         "confined worker of the kernel's interpreter on a copy of the values it reads. Off: such "
                         "cells get no speculative run."),
    ] = True
    transplant_copy_mb: Annotated[
        int,
        Meta(ge=0, le=1 << 20,
             description="Values a copied run reads above this many MiB are first shrunk to consistent row "
                         "subsets (the run is then a miniature one). 0: always copy whole."),
    ] = 128
    warm_workers: Annotated[
        bool,
        Meta(description="Keep one idle worker per kernel interpreter with its imports done, so the next copied "
                         "run skips Python's and the libraries' start-up."),
    ] = True
    export_seconds: Annotated[
        float,
        Meta(ge=0.2, le=60,
             description="The most kernel CPU time one copy of a cell's inputs may take (copied runs); a copy that "
                         "would take longer is not made, and the rules decide the cell. The copy also stops as soon "
                         "as the user's cell is queued on the kernel (ipykernel 7); on other kernels the user's cell "
                         "waits about this long behind it at most."),
    ] = 0.7
    watched_export_seconds: Annotated[
        float,
        Meta(ge=0.2, le=60,
             description="Where the kernel's shell queue is watched (ipykernel 7), the most kernel CPU time one copy "
                         "of a cell's inputs may take: the copy stops the moment the user's cell (or any request) is "
                         "queued, so nothing of the user's waits behind it. Elsewhere exportSeconds applies."),
    ] = 5.0
    worker_idle_seconds: Annotated[
        float,
        Meta(ge=5, le=86400, description="An idle warm worker ends after this many seconds without a run."),
    ] = 600.0
    prewarm_free_mb: Annotated[
        int,
        Meta(ge=0, le=1 << 22,
             description="Background workers (one prepared ahead of a kernel's first copied run once a cell "
                         "imported its libraries, or kept idle after a run) are started only while the machine has "
                         "this many MiB available beyond the worker's expected size."),
    ] = 1024


class SandboxOptions(RunOptions, frozen=True, kw_only=True, rename="camel"):
    """Which sandbox runs a cell (`crane.sandbox`, `--sandbox`), and how (`RunOptions`)."""

    confinement: ConfinementSetting = "auto"


_lock = threading.Lock()
_active = SandboxOptions()


def configure(options: SandboxOptions) -> None:
    """Install the options this process resolved at its edge (the CLI's flags, the editor's settings)."""
    global _active
    with _lock:
        _active = options


def active() -> SandboxOptions:
    """The options runs started now use."""
    return _active


def sandbox_options(run: RunOptions, confinement: Confinement = "auto") -> SandboxOptions:
    """The options of `run`'s `RunOptions` fields (the LSP section is a subclass with more) and `confinement`."""
    fields = {f.name: getattr(run, f.name) for f in msgspec.structs.fields(RunOptions)}
    return SandboxOptions(confinement=confinement, **fields)


def _on_off(text: str) -> bool:
    from crane.envflag import parse_bool

    value = parse_bool(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return value


_DEST = {"layer": "sandbox_layer", "confinement": "sandbox_confinement"}  # field -> the flag's dest, where they differ


def add_sandbox_arguments(parser: argparse.ArgumentParser) -> None:
    """The sandbox flags of every command that runs cells (check, bench, fix, diagnose, mcp)."""
    d = SandboxOptions()
    g = parser.add_argument_group("sandbox")
    g.add_argument("--sandbox", dest="sandbox_confinement", choices=("auto", "os", "portable", "guard"),
                   default=d.confinement,
                   help="which sandbox runs cells: os (Linux's namespaces, Landlock, seccomp), portable (a separate "
                        "worker under the platform's OS layer, a call guard and an audit hook, as on macOS and "
                        "Windows), guard (the call guard and the audit hook alone, opt-in), auto (default: os where "
                        "it runs, else portable where an OS layer can confine it, else none)")
    g.add_argument("--sandbox-layer", dest="sandbox_layer", choices=("auto", "layered", "blocking"), default=d.layer,
                   help=f"how a forked run confines writes (default {d.layer})")
    g.add_argument("--transplant", dest="transplant", type=_on_off, metavar="on|off", default=d.transplant,
                   help="copied runs where the kernel cannot be forked (TF, JAX, CUDA; default on)")
    g.add_argument("--transplant-copy-mb", dest="transplant_copy_mb", type=int, metavar="MB",
                   default=d.transplant_copy_mb,
                   help=f"shrink values above this size before a copied run (default {d.transplant_copy_mb}; 0: never)")
    g.add_argument("--warm-workers", dest="warm_workers", type=_on_off, metavar="on|off", default=d.warm_workers,
                   help="keep an idle worker ready per kernel interpreter (default on)")
    g.add_argument("--export-seconds", dest="export_seconds", type=float, metavar="S", default=d.export_seconds,
                   help=f"the most kernel time one copy of a cell's inputs may take (default {d.export_seconds:g})")
    g.add_argument("--watched-export-seconds", dest="watched_export_seconds", type=float, metavar="S",
                   default=d.watched_export_seconds,
                   help="the same where the kernel's queue is watched, so the user's cell stops the copy at once "
                        f"(ipykernel 7; default {d.watched_export_seconds:g})")
    g.add_argument("--worker-idle-seconds", dest="worker_idle_seconds", type=float, metavar="S",
                   default=d.worker_idle_seconds,
                   help=f"an idle warm worker ends after this long (default {d.worker_idle_seconds:g})")


def options_from_args(args: argparse.Namespace) -> SandboxOptions:
    """The options the flags say, validated against the declared bounds (msgspec.ValidationError naming the
    flag otherwise)."""
    raw = {}
    for f in msgspec.structs.fields(SandboxOptions):
        dest = _DEST.get(f.name, f.name)
        if not hasattr(args, dest):
            continue
        try:
            msgspec.convert({f.encode_name: getattr(args, dest)}, SandboxOptions)
        except msgspec.ValidationError as exc:
            flag = "--" + dest.replace("_", "-")
            raise msgspec.ValidationError(f"{flag}: {str(exc).split(' - at ', 1)[0]}") from None
        raw[f.encode_name] = getattr(args, dest)
    return msgspec.convert(raw, SandboxOptions)

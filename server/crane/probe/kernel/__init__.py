"""The probe's kernel side: runs INSIDE the user's kernel, never in the daemon.

Standard library only; every file here is one part of the private module `_crane_probe` that
`crane.probe.collect.PROBE_MODULE` installs through a silent request (`crane.kernel.private_module`), in the order
of `PROBE_PARTS`. Imports between these parts are marked `# kernel: strip` (blanked before sending); they keep
the parts importable and type-checked in the daemon. No file here imports anything outside this folder and the
standard library, and no daemon module imports one (tests/architecture).

Every function is annotated (mypy's `disallow_untyped_defs` for this folder), for the type checker only: each
part starts with `from __future__ import annotations`, so no annotation is ever evaluated in the kernel (whose
Python may be older than the daemon's, and which lacks the names the stripped imports bring). Values from the
user's namespace are `Any`; code that avoids calling user-overridable methods stays as it is, and mypy is told
why where it cannot follow (a narrow `cast` or `# type: ignore[code]` with its reason).
"""

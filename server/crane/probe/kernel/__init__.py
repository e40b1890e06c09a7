"""The probe's kernel side: runs INSIDE the user's kernel, never in the daemon.

Standard library only; every file here is one part of the private module `_crane_probe` that
`crane.probe.collect.PROBE_MODULE` installs through a silent request (`crane.kernel.private_module`), in the order
of `PROBE_PARTS`. Imports between these parts are marked `# kernel: strip` (blanked before sending); they keep
the parts importable and type-checked in the daemon. No file here imports anything outside this folder and the
standard library, and no daemon module imports one (tests/architecture).
"""

"""The fork sandbox's kernel side: runs INSIDE the user's kernel and the child forked from it, never in the daemon.

Standard library only; every file here is one part of the private module `_crane_sandbox`
(`crane.sandbox.channel.SANDBOX_MODULE`, in the order of `SANDBOX_PARTS`), installed through a silent request
(`crane.kernel.private_module`); `export.py` (with `library.py` and `miniature.py`) is the transplant's export
module `_crane_transplant`. The kernel process itself only forks and returns (`entry.py`) or answers an export;
everything else runs in the forked child: isolation (`isolation.py`, `fds.py`, `mappings.py`, `atfork.py`), the
private layer (`layer.py`), confinement (`confine.py`: Landlock, seccomp-BPF, rlimits; `audit.py`), shrinking
(`miniature.py`), the run (`run.py`) and the agent's session (`session.py`). Imports between parts are marked
`# kernel: strip`; no file here imports anything but the standard library, its siblings and `sandbox/shared/`,
and no daemon module imports one (tests/architecture).
"""

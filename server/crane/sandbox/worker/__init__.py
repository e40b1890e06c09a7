"""The transplant worker: a process of the kernel's own interpreter that runs a cell on a copy of the state.

Not the daemon, not the kernel: `boot.py` is its program (the daemon sends its text as `python -c`), `main.py`
confines the worker with the kernel side's own code (`sandbox/kernel/isolation.py`), loads the exported state
and runs the cell; `devices.py` answers GPU requests on the CPU. Built from the same stdlib-only parts as the
kernel side (`crane.sandbox.transplant.WORKER_MODULE`): imports only the standard library, its siblings,
`sandbox/kernel/` and `sandbox/shared/` (tests/architecture).
"""

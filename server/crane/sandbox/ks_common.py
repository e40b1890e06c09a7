"""Fork sandbox, kernel side, part 1: names every part shares (standard library only).

The sandbox's kernel-side parts (`ks_*.py`, after `seccomp.py`) run INSIDE the user's kernel, where CRANE is not
installed: `fork_runner.SANDBOX_MODULE` compiles them, in order, into one private module (`_crane_sandbox`,
installed by `crane.kernel.private_module`; the lines marked `# kernel: strip` — imports between parts — are
blanked). They bind no names in the user's namespace. Order: seccomp, ks_common, ks_audit, ks_isolation,
ks_run, ks_session, ks_parent (the entry points `start` and `session`).
"""

from __future__ import annotations

import json
import os

CELL_FILENAME = "<crane-sandbox-cell>"
_CO_COROUTINE = 0x80
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxBlocked(PermissionError):
    """Raised inside the sandbox child when the cell attempts a side effect (audit-hook level)."""


def _summarise_data(data, kind: str) -> dict:
    text = ""
    if isinstance(data, dict):
        text = str(data.get("text/plain", ""))
        mimes = sorted(str(k) for k in data)
    else:
        mimes = []
    return {"kind": kind, "text": text[:4000], "mimetypes": mimes[:10]}


def _write_json(fd: int, obj: dict) -> None:
    data = (json.dumps(obj, default=str) + "\n").encode("utf-8", "replace")
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[n:]

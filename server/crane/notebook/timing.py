"""How long a cell took when it last ran, from the timing Jupyter front ends record in the notebook.

JupyterLab (with "record timing" on) and nbclient/nbconvert (on by default) store ISO timestamps of the run's
messages in the cell's `metadata.execution`: `iopub.status.busy`, `iopub.execute_input`,
`shell.execute_reply.started`, `shell.execute_reply`, `iopub.status.idle`. The duration is from the start of the
run (`shell.execute_reply.started`, else `iopub.execute_input`, else `iopub.status.busy`) to its end
(`shell.execute_reply`, else `iopub.status.idle`). VS Code keeps its timing in memory (the cell's execution
summary), not in the file; the language server measures runs itself (see crane.lsp.run_timing).
Anything malformed gives None.
"""

from __future__ import annotations

from datetime import datetime

_STARTS = ("shell.execute_reply.started", "iopub.execute_input", "iopub.status.busy")
_ENDS = ("shell.execute_reply", "iopub.status.idle")


def _when(value) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def recorded_seconds(metadata) -> float | None:
    """The duration of the cell's last recorded run, in seconds, or None."""
    execution = metadata.get("execution") if isinstance(metadata, dict) else None
    if not isinstance(execution, dict):
        return None
    start = next((t for t in (_when(execution.get(k)) for k in _STARTS) if t is not None), None)
    end = next((t for t in (_when(execution.get(k)) for k in _ENDS) if t is not None), None)
    if start is None or end is None:
        return None
    try:
        seconds = (end - start).total_seconds()
    except TypeError:  # one timestamp with a zone, one without
        return None
    return seconds if 0 <= seconds < 7 * 24 * 3600 else None

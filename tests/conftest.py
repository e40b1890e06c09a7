"""Suite-wide: the closing summary says which Pythons the kernel tests ran on (the tests parametrised over
tests/kernel_envs.py's PYTHON_KERNELS carry `[py3.X` in their ids), with the reason of any version skipped."""

from __future__ import annotations

import re
from collections import Counter

_PYTHON_ID = re.compile(r"\[py(3\.\d+t?)")


def pytest_terminal_summary(terminalreporter) -> None:
    counts: dict[str, Counter] = {}
    reasons: dict[str, set[str]] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            found = _PYTHON_ID.search(getattr(report, "nodeid", "") or "")
            if found is None:
                continue
            counts.setdefault(found.group(1), Counter())[outcome] += 1
            if outcome == "skipped" and isinstance(report.longrepr, tuple):
                reasons.setdefault(found.group(1), set()).add(str(report.longrepr[2]).removeprefix("Skipped: "))
    if not counts:
        return
    terminalreporter.write_sep("-", "kernels by Python version")
    for version in sorted(counts, key=lambda v: tuple(int(p) for p in v.rstrip("t").split("."))):
        line = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts[version].items()))
        why = "; ".join(sorted(reasons.get(version, ())))
        terminalreporter.write_line(f"Python {version}: {line}" + (f" ({why})" if why else ""))

"""Suite-wide:
- the closing summary says which Pythons the kernel tests ran on (the tests parametrised over tests/kernel_envs.py's
  PYTHON_KERNELS carry `[py3.X` in their ids), with the reason of any version skipped;
- a test that failed only because a library the bench extra leaves out on this Python is not installed (torch on
  3.12+: pyproject.toml) is reported skipped, saying so. Only when the library really cannot be found here (the
  tests' kernels run this interpreter), the failure names it as missing, and CRANE's own code in this process did
  not raise it (the daemon never needs torch: that is a bug, reported failed). Tests that know they need torch say
  so with tests/library_versions.needs_torch; this catches the rest (bench notebooks that import it).
- the costliest files run first (tests/slow_first.py): xdist's workers then end together, not on one long file;
  with `--durations`, the run ends by printing each file's summed seconds (tests/file_seconds.py), which that
  order is refreshed from.
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

from .file_seconds import write_seconds_by_file
from .slow_first import slow_first

NOT_IN_THE_BENCH_EXTRA_FROM_3_12 = ("torch",)
_MISSING = re.compile(r"No module named '([A-Za-z0-9_]+)")
_CRANE = Path(__file__).resolve().parent.parent / "server" / "crane"


def _raised_by_crane(excinfo) -> bool:
    """The import failed in CRANE's own code, in this process (not in a kernel or a worker, whose errors reach the
    tests as text)."""
    return excinfo.errisinstance(ImportError) and any(
        Path(str(entry.path)).resolve().is_relative_to(_CRANE) for entry in excinfo.traceback)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None:
        return
    found = _MISSING.search(str(call.excinfo.value))
    if (found and found.group(1) in NOT_IN_THE_BENCH_EXTRA_FROM_3_12 and importlib.util.find_spec(found.group(1)) is None
            and not _raised_by_crane(call.excinfo)):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: {found.group(1)} is not installed for this Python (pyproject.toml's bench extra "
                           "has none from 3.12)")

@pytest.hookimpl(trylast=True)  # after pytest's own order (module-scoped parameters grouped) and -k/-m
def pytest_collection_modifyitems(items) -> None:
    items[:] = slow_first(items)


_PYTHON_ID = re.compile(r"\[py(3\.\d+t?)")


def pytest_terminal_summary(terminalreporter) -> None:
    write_seconds_by_file(terminalreporter)
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

"""Each test file's seconds, summed over its tests' setup, call and teardown, printed at the end of a run that asks
for `--durations` (tests/conftest.py; `make test-python` does): the numbers tests/slow_first.py's `SECONDS` is
refreshed from, for every file, new ones included (the slowest 25 tests alone do not say which files cost most)."""

from __future__ import annotations

from collections.abc import Iterable

from .slow_first import file_of

SHOWN = 40  # files printed, the costliest first


def seconds_by_file(reports: Iterable[object]) -> list[tuple[str, float, int]]:
    """(file, its reports' summed seconds, its number of tests) for each file that has timed reports, the costliest
    first. Reports without a duration or a node id (warnings, deselected items) are left out."""
    seconds: dict[str, float] = {}
    tests: dict[str, set[str]] = {}
    for report in reports:
        duration = getattr(report, "duration", None)
        nodeid = getattr(report, "nodeid", "")
        if not isinstance(duration, (int, float)) or not nodeid:
            continue
        path = file_of(nodeid)
        seconds[path] = seconds.get(path, 0.0) + duration
        tests.setdefault(path, set()).add(nodeid)
    return sorted(((path, s, len(tests[path])) for path, s in seconds.items()), key=lambda row: (-row[1], row[0]))


def write_seconds_by_file(terminalreporter) -> None:
    if terminalreporter.config.option.durations is None:
        return
    rows = seconds_by_file(report for reports in terminalreporter.stats.values() for report in reports)
    if not rows:
        return
    terminalreporter.write_sep("-", f"seconds by file (setup + call + teardown), the {min(SHOWN, len(rows))} costliest")
    for path, seconds, count in rows[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s {count:5d} tests  {path}")

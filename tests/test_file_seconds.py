"""tests/file_seconds.py: each file's setup, call and teardown seconds summed, its tests counted once, the costliest
file first; reports with no duration or node id left out."""

from __future__ import annotations

from dataclasses import dataclass

from .file_seconds import seconds_by_file


@dataclass
class Report:
    nodeid: str
    duration: float
    when: str = "call"


@dataclass
class Untimed:  # a warning's report: no duration
    nodeid: str = ""


def test_each_files_phases_summed_its_tests_counted_once_costliest_first():
    reports = [Report("tests/a.py::t[1]", 1.0, "setup"), Report("tests/a.py::t[1]", 2.0),
               Report("tests/a.py::t[1]", 0.5, "teardown"), Report("tests/a.py::u", 4.0),
               Report("tests/b/c.py::v", 9.0), Report("tests/d.py::w", 0.25), Untimed(),
               Report("", 100.0)]
    assert seconds_by_file(reports) == [("tests/b/c.py", 9.0, 1), ("tests/a.py", 7.5, 2), ("tests/d.py", 0.25, 1)]


def test_equal_seconds_in_path_order_and_nothing_timed_is_empty():
    assert seconds_by_file([Report("tests/z.py::t", 1.0), Report("tests/y.py::t", 1.0)]) == [
        ("tests/y.py", 1.0, 1), ("tests/z.py", 1.0, 1)]
    assert seconds_by_file([Untimed("tests/a.py::t")]) == []

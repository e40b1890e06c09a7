"""tests/slow_first.py: the costliest files first, each file's items together and in their own order, files not
listed after the listed ones in their own order; and the suite as collected is in that order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .slow_first import SECONDS, file_of, slow_first


@dataclass
class Item:
    nodeid: str


def test_listed_files_first_by_cost_each_file_whole_and_in_its_own_order(monkeypatch):
    monkeypatch.setattr("tests.slow_first.SECONDS", {"tests/b.py": 10.0, "tests/d.py": 50.0})
    ids = ["tests/a.py::x", "tests/b.py::t[ipython8-1]", "tests/b.py::t[ipython8-2]", "tests/b.py::t[ipython9-1]",
           "tests/c.py::y", "tests/d.py::z1", "tests/d.py::z2", "tests/e.py::w"]
    out = [i.nodeid for i in slow_first([Item(n) for n in ids])]
    assert out == ["tests/d.py::z1", "tests/d.py::z2", "tests/b.py::t[ipython8-1]", "tests/b.py::t[ipython8-2]",
                   "tests/b.py::t[ipython9-1]", "tests/a.py::x", "tests/c.py::y", "tests/e.py::w"]


def test_the_collected_suite_runs_in_that_order(request):
    items = request.session.items
    files = [file_of(i.nodeid) for i in items]
    runs = [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]
    assert len(runs) == len(set(runs)), "a file's tests were split"
    listed = [f for f in runs if f in SECONDS]
    assert listed == sorted(listed, key=lambda f: -SECONDS[f]), listed
    if listed and len(runs) > len(listed):
        assert runs[:len(listed)] == listed, runs[:len(listed) + 1]


@pytest.mark.parametrize("path", sorted(SECONDS))
def test_every_listed_file_exists(path):
    from pathlib import Path

    assert (Path(__file__).resolve().parent.parent / path).is_file(), path

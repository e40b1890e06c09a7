"""The CI matrix for what cannot run on CRANE's build machine (.github/workflows/portable.yml): it parses, runs on
every push on macOS, Windows and Linux ARM, and every test path, marker and extra it names exists (a renamed test
file or marker would otherwise leave a job that silently selects nothing)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "portable.yml"
pytestmark = pytest.mark.portable_platform


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _pytest_runs() -> list[list[str]]:
    """The argument lists of every `python -m pytest` the workflow runs."""
    out = []
    for job in _workflow()["jobs"].values():
        for step in job["steps"]:
            run = step.get("run") or ""
            words = shlex.split(run.replace("\n", " "))
            if words[:3] == ["python", "-m", "pytest"]:
                out.append(words[3:])
    return out


def test_it_runs_on_every_push_on_macos_windows_and_linux_arm():
    wf = _workflow()
    triggers: dict = wf["on"] if "on" in wf else wf[True]  # YAML 1.1 reads the bare key `on` as true
    assert "push" in triggers and (triggers["push"] is None or not triggers["push"].get("branches"))
    (job,) = wf["jobs"].values()
    matrix = job["strategy"]["matrix"]
    assert set(matrix["os"]) == {"macos-latest", "windows-latest", "ubuntu-24.04-arm"}
    assert {"3.11", "3.12"} <= set(matrix["python"])
    assert job["runs-on"] == "${{ matrix.os }}" and job["strategy"]["fail-fast"] is False
    uses = [s["uses"] for s in job["steps"] if "uses" in s]
    assert any(u.startswith("actions/checkout@v") for u in uses)
    assert any(u.startswith("actions/setup-python@v") for u in uses)
    assert any(s.get("with", {}).get("python-version") == "${{ matrix.python }}" for s in job["steps"])


def test_every_test_path_marker_and_extra_it_names_exists():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = {m.split(":")[0].strip() for m in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    runs = _pytest_runs()
    assert runs, "no pytest step"
    for args in runs:
        paths = [a for a in args if a.startswith("tests/")]
        assert paths, args
        marker = args[args.index("-m") + 1] if "-m" in args else None
        for p in paths:
            file = ROOT / p.split("::")[0]
            assert file.is_file(), p
            if marker is not None:  # each file selected by marker has tests carrying it
                assert marker in markers, marker
                assert f"pytest.mark.{marker}" in file.read_text(encoding="utf-8"), (p, marker)
    extras = set(pyproject["project"]["optional-dependencies"])
    for job in _workflow()["jobs"].values():
        for step in job["steps"]:
            run = step.get("run") or ""
            if "pip install" in run and "[" in run:
                named = run[run.index("[") + 1:run.index("]")]
                assert set(named.split(",")) <= extras, named


def test_this_file_runs_in_the_matrix():
    assert any(str(Path(__file__).relative_to(ROOT)).replace("\\", "/") in args for args in _pytest_runs())

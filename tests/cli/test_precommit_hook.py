"""The `crane-check` pre-commit hook (.pre-commit-hooks.yaml): its definition, its entry run as pre-commit runs
it (the installed `crane` script, the hook's args, then the staged notebooks' names), and the real pre-commit
tool installing and running it from this checkout (offline: its environment comes from the package index)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import make_notebook

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / ".pre-commit-hooks.yaml"
CRASH = [("x = 1", 1), ("print(x + y)", None)]
CLEAN = [("x = 1", 1), ("print(x + 1)", None)]


def _hook() -> dict:
    hooks = yaml.safe_load(HOOKS.read_text())
    [hook] = [h for h in hooks if h["id"] == "crane-check"]
    return hook


def test_hook_definition():
    hook = _hook()
    assert hook["language"] == "python"
    assert hook["types"] == ["jupyter"]
    assert hook["pass_filenames"] is True
    assert shlex.split(hook["entry"]) == ["crane", "check"]
    assert hook["name"] and hook["description"]


def _run_entry(hook: dict, files: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """As pre-commit runs it: entry, args, file names; `crane` is the console script this install provides."""
    cmd = shlex.split(hook["entry"]) + list(hook.get("args", [])) + files
    script = Path(sys.executable).parent / cmd[0]
    assert script.exists(), f"the {cmd[0]!r} console script is not installed beside {sys.executable}"
    return subprocess.run([str(script), *cmd[1:]], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_hook_entry_fails_on_a_predicted_crash_and_passes_clean_notebooks(tmp_path):
    make_notebook(tmp_path / "a.ipynb", CRASH)
    make_notebook(tmp_path / "b.ipynb", CLEAN)
    hook = _hook()
    res = _run_entry(hook, ["a.ipynb", "b.ipynb"], tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "a.ipynb: cell 2, line 1: NameError: name 'y' is not defined" in res.stdout
    assert "b.ipynb: cell 2: no crash predicted" in res.stdout
    ok = _run_entry(hook, ["b.ipynb"], tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout")
def test_pre_commit_installs_and_runs_the_hook(tmp_path):
    pre_commit = Path(sys.executable).parent / "pre-commit"
    if not pre_commit.exists():
        pytest.skip("pre-commit is not installed (it is in the test extra)")
    work = tmp_path / "project"
    work.mkdir()
    # PIP_NO_COMPILE=0 is pip's `--no-compile` (pip reads a --no-X flag's variable inverted: "1" would compile):
    # the hook's environment is used once, so byte-compiling its ~2500 modules at install (5 CPU-s, half the
    # test's wall time) is waste; how the hook is installed and what it runs are unchanged.
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "PIP_NO_COMPILE": "0"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    make_notebook(work / "crash.ipynb", CRASH)
    make_notebook(work / "clean.ipynb", CLEAN)
    (work / "notes.txt").write_text("not a notebook: the hook's types skip it\n")
    subprocess.run(["git", "add", "."], cwd=work, check=True, env=env)

    def try_repo(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(pre_commit), "try-repo", str(REPO), "crane-check", "--verbose", "--files", *files],
            cwd=work, capture_output=True, text=True, timeout=900, env=env,
        )

    # One run (each try-repo of a checkout with changes installs the hook's environment anew, 20 s of CPU): the
    # hook fails on the crash, passes the clean notebook, and is not given the text file. That a clean notebook
    # alone passes is the entry's exit status, tested above.
    res = try_repo("crash.ipynb", "clean.ipynb", "notes.txt")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out  # 2 if notes.txt had been passed to crane (not a notebook)
    assert "crash.ipynb: cell 2, line 1: NameError: name 'y' is not defined" in out
    assert "clean.ipynb: cell 2: no crash predicted" in out and "notes.txt" not in out

"""`.venv` follows PYTHON: the Makefile's `make setup` and envs/make_daemon_env.sh, run for real in a checkout of
the Makefile and the envs scripts, with stub interpreters of two versions (each records its `-m venv` and the pip
installs of the environments it made), so a daemon environment of one Python is never reused for another."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _interpreter(path: Path, version: str, log: Path) -> Path:
    """A stub Python `version` at `path`: `-c` prints its identity (as envs/python_identity.sh's query does), and
    `-m venv [--clear] DIR` makes DIR/bin/python, whose identity is its base's (a venv's python resolves to it)
    and whose `-m pip install` is logged with the version."""
    identity = f'if [ "$1" = -I ]; then shift; fi\nif [ "$1" = -c ]; then echo {version} {path}; exit 0; fi\n'
    inner = f'{identity}[ "$1 $2 $3" = "-m pip install" ]\necho "{version} pip $*" >> {log}\n'
    body = (
        identity
        + '[ "$1 $2" = "-m venv" ]\nshift 2\n'
        + f'if [ "$1" = --clear ]; then shift; rm -rf "$1"; echo "{version} venv --clear $1" >> {log}; fi\n'
        + 'mkdir -p "$1/bin"\n'
        + f'cat > "$1/bin/python" <<\'EOS\'\n#!/usr/bin/env bash\nset -eu\n{inner}EOS\nchmod +x "$1/bin/python"\n'
    )
    path.write_text("#!/usr/bin/env bash\nset -eu\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def checkout(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "envs", root / "envs", ignore=shutil.ignore_patterns("*.txt"))
    shutil.copy(ROOT / "Makefile", root / "Makefile")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    log = tmp_path / "python.log"
    pythons = {v: _interpreter(tmp_path / f"python{v}", f"{v}.0", log) for v in ("3.11", "3.13")}
    return root, pythons, log


def _setup(root: Path, python: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(["make", "--no-print-directory", "setup", f"PYTHON={python}", f"DAEMON_ENV_CACHE={cache}"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def _installs(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_venv_is_the_daemon_environment_of_the_python_named(checkout, tmp_path):
    root, pythons, log = checkout
    cache, venv = tmp_path / "cache", root / ".venv"

    assert _setup(root, pythons["3.11"], cache).returncode == 0
    first = os.readlink(venv)
    assert _installs(log) == ["3.11.0"]

    # another Python: its own environment, built and linked, never the 3.11 one reused
    res = _setup(root, pythons["3.13"], cache)
    assert res.returncode == 0, res.stderr
    second = os.readlink(venv)
    assert second != first and Path(second).parent == cache
    assert _installs(log) == ["3.11.0", "3.13.0"]
    assert f"3.13.0 {pythons['3.13']}" in (root / "build" / "daemon-env.txt").read_text()

    # back to the first: linked again from the cache, nothing installed; then nothing to do at all
    for _ in range(2):
        res = _setup(root, pythons["3.11"], cache)
        assert res.returncode == 0, res.stderr
        assert os.readlink(venv) == first and _installs(log) == ["3.11.0", "3.13.0"]
    assert "make_daemon_env" not in res.stdout


def test_a_real_venv_folder_of_another_python_is_made_again(checkout, tmp_path):
    """A .venv made in the checkout (the cache could not be written) by 3.11 is not updated in place for 3.13."""
    root, pythons, log = checkout
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert _setup(root, pythons["3.11"], blocker / "cache").returncode == 0
    res = _setup(root, pythons["3.13"], blocker / "cache")
    assert res.returncode == 0, res.stderr
    assert "made by another Python" in res.stderr
    assert _installs(log) == ["3.11.0", "3.13.0", "3.13.0"]  # pip, venv --clear, pip
    assert (root / ".venv").is_dir() and not (root / ".venv").is_symlink()

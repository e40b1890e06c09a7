"""The build-once caches a clean CI checkout reuses: envs/npm_modules.sh (the client's node_modules),
envs/make_env.sh (a Python environment) and envs/make_daemon_env.sh (`.venv`), run for real with stub `npm`/`node`/Python programs that record their
calls, so the tests need no network and no minutes of installing."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NPM_MODULES = ROOT / "envs" / "npm_modules.sh"
MAKE_ENV = ROOT / "envs" / "make_env.sh"


def _program(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\nset -eu\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def stub_npm(tmp_path):
    """`npm ci` that installs a node_modules holding the lock file it saw, and logs where it ran; `node --version`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "npm.log"
    _program(bin_dir / "npm", f'[ "$1" = ci ]\npwd >> {log}\nmkdir -p node_modules\ncp package-lock.json node_modules/lock-seen\n')
    _program(bin_dir / "node", 'echo v20.0.0\n')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return env, log


def _project(tmp_path: Path, lock: str = '{"lockfileVersion": 3}') -> Path:
    p = tmp_path / "checkout" / "vscode-client"
    p.mkdir(parents=True)
    (p / "package.json").write_text('{"name": "x"}')
    (p / "package-lock.json").write_text(lock)
    return p


def _npm_modules(project: Path, cache: Path, env) -> subprocess.CompletedProcess:
    return subprocess.run([str(NPM_MODULES), str(project), str(cache)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_node_modules_are_installed_once_per_lock_file_and_linked(tmp_path, stub_npm):
    env, log = stub_npm
    cache = tmp_path / "cache"
    first = _project(tmp_path)
    assert _npm_modules(first, cache, env).returncode == 0
    modules = first / "node_modules"
    assert modules.is_symlink() and Path(os.readlink(modules)).parent.parent == cache
    assert (modules / "lock-seen").read_text() == '{"lockfileVersion": 3}'
    assert len(log.read_text().splitlines()) == 1

    # a second clean checkout with the same lock file: linked, npm not run again
    second = _project(tmp_path / "again")
    res = _npm_modules(second, cache, env)
    assert res.returncode == 0, res.stderr
    assert os.readlink(second / "node_modules") == os.readlink(modules)
    assert len(log.read_text().splitlines()) == 1

    # another lock file: its own install
    third = _project(tmp_path / "changed", lock='{"lockfileVersion": 3, "packages": {}}')
    assert _npm_modules(third, cache, env).returncode == 0
    assert os.readlink(third / "node_modules") != os.readlink(modules)
    assert len(log.read_text().splitlines()) == 2


def test_an_unfinished_install_is_redone(tmp_path, stub_npm):
    env, log = stub_npm
    cache = tmp_path / "cache"
    project = _project(tmp_path)
    assert _npm_modules(project, cache, env).returncode == 0
    target = Path(os.readlink(project / "node_modules")).parent
    (target / ".complete").unlink()  # as if the run that built it was killed
    (project / "node_modules").unlink()
    assert _npm_modules(project, cache, env).returncode == 0
    assert (target / ".complete").exists() and len(log.read_text().splitlines()) == 2


def test_a_real_node_modules_folder_is_kept_and_updated_in_place(tmp_path, stub_npm):
    env, log = stub_npm
    project = _project(tmp_path)
    (project / "node_modules").mkdir()
    assert _npm_modules(project, tmp_path / "cache", env).returncode == 0
    assert not (project / "node_modules").is_symlink() and (project / "node_modules" / "lock-seen").exists()
    assert log.read_text().splitlines() == [str(project)]
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_installs_in_the_checkout(tmp_path, stub_npm):
    """A cache path under a regular file cannot be made (root included): node_modules goes in the checkout."""
    env, log = stub_npm
    project = _project(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = _npm_modules(project, blocker / "cache", env)
    assert res.returncode == 0 and "cannot be written" in res.stderr
    assert (project / "node_modules").is_dir() and not (project / "node_modules").is_symlink()
    assert log.read_text().splitlines() == [str(project)]


@pytest.fixture
def stub_python(tmp_path):
    """A Python whose `-m venv DIR` makes DIR/bin/python, itself a stub whose `-m pip install -r REQ` records REQ
    (both say they are 3.11.0 at the stub's path, as a venv's interpreter resolves to its base's)."""
    log = tmp_path / "pip.log"
    identity = f'if [ "$1" = -I ]; then shift; fi\nif [ "$1" = -c ]; then echo 3.11.0 {tmp_path}/python-stub; exit 0; fi\n'
    inner = f'{identity}[ "$1 $2 $3" = "-m pip install" ]\necho "$@" >> {log}\n'
    outer = (
        identity +
        '[ "$1 $2" = "-m venv" ]\nmkdir -p "$3/bin"\n'
        f'cat > "$3/bin/python" <<\'EOS\'\n#!/usr/bin/env bash\nset -eu\n{inner}EOS\nchmod +x "$3/bin/python"\n'
    )
    return _program(tmp_path / "python-stub", outer), log


def test_an_environment_is_built_once_per_requirements_file(tmp_path, stub_python):
    python, log = stub_python
    env = {**os.environ, "PYTHON": str(python)}
    req = tmp_path / "reqs.txt"
    req.write_text("numpy==2.0\n")
    cache, link = tmp_path / "cache", tmp_path / "checkout" / "build" / "env"
    for _ in range(2):
        res = subprocess.run([str(MAKE_ENV), str(req), str(cache), str(link)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
    assert link.is_symlink() and (link / ".complete").exists()
    assert len(log.read_text().splitlines()) == 1  # the second run only linked it
    req.write_text("numpy==2.1\n")
    res = subprocess.run([str(MAKE_ENV), str(req), str(cache), str(link)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and len(log.read_text().splitlines()) == 2


def _daemon_checkout(tmp_path: Path) -> Path:
    """A checkout holding the scripts (make_daemon_env.sh writes build/daemon-env.txt into its own checkout)."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "envs", root / "envs", ignore=shutil.ignore_patterns("*.txt"))
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def _daemon_env(root: Path, venv: Path, cache: Path, python: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(root / "envs" / "make_daemon_env.sh"), str(venv), str(cache)],
                          env={**os.environ, "PYTHON": str(python)}, capture_output=True, text=True, timeout=60)


def test_the_daemon_environment_is_built_once_per_pyproject_and_linked(tmp_path, stub_python):
    python, log = stub_python
    root = _daemon_checkout(tmp_path)
    venv, cache = root / ".venv", tmp_path / "cache"
    for _ in range(2):
        res = _daemon_env(root, venv, cache, python)
        assert res.returncode == 0, res.stderr
    assert venv.is_symlink() and Path(os.readlink(venv)).parent == cache and (venv / ".complete").exists()
    [install] = log.read_text().splitlines()
    assert install.endswith(str(root / "build" / "daemon-env.txt"))
    assert f"-e {root}[test,lint,bench,llm]" in (root / "build" / "daemon-env.txt").read_text()


def test_a_real_venv_folder_or_an_unwritable_cache_builds_in_the_checkout(tmp_path, stub_python):
    python, log = stub_python
    root = _daemon_checkout(tmp_path)
    venv = root / ".venv"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = _daemon_env(root, venv, blocker / "cache", python)
    assert res.returncode == 0 and "cannot be written" in res.stderr, res.stderr
    assert venv.is_dir() and not venv.is_symlink()
    res = _daemon_env(root, venv, tmp_path / "cache", python)  # now a real folder: kept, updated in place
    assert res.returncode == 0, res.stderr
    assert not venv.is_symlink() and not (tmp_path / "cache").exists()
    assert [line.split()[-1] for line in log.read_text().splitlines()] == [f"{root}[test,lint,bench,llm]"] * 2

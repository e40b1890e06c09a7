"""Helpers for CLI tests: write small notebooks and run the real `crane` command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest


def make_notebook(path: Path, cells: Sequence[tuple[str, int | str | None]], nbformat: int = 4) -> Path:
    """cells: (source, execution_count or None); markdown cells are written as ('# md', 'md')."""
    out: list[dict] = []
    for i, (src, count) in enumerate(cells):
        if count == "md":
            out.append({"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": src})
        else:
            out.append({"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": count,
                        "outputs": [], "source": src})
    path.write_text(json.dumps({"cells": out, "metadata": {}, "nbformat": nbformat, "nbformat_minor": 5}))
    return path


def crane(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crane", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


@pytest.fixture
def nb_dir(tmp_path: Path) -> Path:
    return tmp_path

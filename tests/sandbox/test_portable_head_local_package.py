"""The portable head runs no code of the notebook's own packages (issue 45, review finding H4): the kernel's
env.json names its local packages' submodules too (`localpkg.sub`), and `find_spec("localpkg.sub")` imports
`localpkg` before any library check could refuse it. worker/main.py `_import(only_library=True)` decides each
package above a name (without importing it) before it looks the name up. A real interpreter: the package's
`__init__` appends its process's pid to a marker file when it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox import speculate
from crane.sandbox.transplant import POOL
from crane.sandbox.worker.head import kernel_held
from crane.sandbox.worker.linux import linux_layer_available

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..sandbox_options import use_options
from .head_children import forked_ahead

_IMPORTS = """
import json, sys
sys.path.insert(0, {root!r})
from crane.sandbox.worker.head import kernel_held
from crane.sandbox.worker.main import _import
names = kernel_held({{"submodules": ["localpkg.sub", "localpkg.deep.leaf", "json.tool", "email.mime.text"]}},
                    ["localpkg", "json", "email"])
_import(names + ["localpkg", "localpkg.deep"], only_library=True)
print(json.dumps({{m: m in sys.modules for m in ("localpkg", "localpkg.sub", "localpkg.deep", "json.tool",
                                                "email.mime.text")}}))
"""


def _local_package(root: Path) -> Path:
    pkg = root / "localpkg"
    (pkg / "deep").mkdir(parents=True)
    marker = root / "imported.txt"
    code = f"import os\nwith open({str(marker)!r}, 'a') as f:\n    f.write(str(os.getpid()) + '\\n')\n"
    (pkg / "__init__.py").write_text(code)
    (pkg / "sub.py").write_text(code + "x = 1\n")
    (pkg / "deep" / "__init__.py").write_text(code)
    (pkg / "deep" / "leaf.py").write_text(code)
    return marker


def test_import_only_library_never_runs_a_local_packages_code(tmp_path):
    marker = _local_package(tmp_path)
    got = subprocess.run([sys.executable, "-c", textwrap.dedent(_IMPORTS.format(root=str(tmp_path)))],
                         capture_output=True, text=True, timeout=120, check=True)
    held = json.loads(got.stdout.strip().splitlines()[-1])
    assert not marker.exists(), marker.read_text()  # before the fix: localpkg's __init__ ran (find_spec of a child)
    assert held == {"localpkg": False, "localpkg.sub": False, "localpkg.deep": False, "json.tool": True,
                    "email.mime.text": True}, held


def test_kernel_held_still_names_a_local_packages_submodules_the_import_refuses():
    # (the filter is `_import`'s: kernel_held names them, so the refusal above is the one that matters)
    assert kernel_held({"submodules": ["localpkg.sub"]}, ["localpkg"]) == ["localpkg.sub"]


def _held_package(root: Path) -> Path:
    """A local package whose `__init__` keeps its `held.txt` open (a read: a confined run may import it too,
    where a write would be refused), so a process that ran it shows the file among its descriptors."""
    pkg = root / "localpkg"
    pkg.mkdir()
    held = pkg / "held.txt"
    held.write_text("held\n")
    (pkg / "__init__.py").write_text("import os\n_HELD = open(os.path.join(os.path.dirname(__file__), 'held.txt'))\n")
    (pkg / "sub.py").write_text("x = 1\n")
    return held


def _holds(pid: int, path: Path) -> bool:
    found = False
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found = found or os.readlink(fd) == str(path)
        except OSError:
            continue
    return found


@pytest.mark.skipif(linux_layer_available() is not None, reason="heads serve runs under Landlock")
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_head_never_imports_the_kernels_local_package(kernel_env, tmp_path, monkeypatch):
    held = _held_package(tmp_path)  # next to the notebook, the kernel's folder (where its worker starts too)
    opts = use_options(monkeypatch, confinement="portable", warm_workers=True, worker_idle_seconds=600.0)
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = kernel.connection
        setup = "import sklearn.svm\nfrom localpkg.sub import x\n"
        assert conn.run_cell(setup).status == "ok"
        first = speculate(conn, "import os\ny = x + 1\nprint(os.getpid())", 120.0, sandbox=opts)
        assert (first.verdict, first.mode) == ("no-crash", "portable"), first
        head = first.pid
        assert head is not None
        forked_ahead(head, (int(first.stdout.split()[0]),))  # made ready for its next run: its imports are done
        # the kernel's package ran in the kernel (and perhaps in a run's confined process), never in the head
        assert not _holds(head, held), "the head ran localpkg's __init__"
        second = speculate(conn, "print(x + 2)", 120.0, sandbox=opts)
        assert (second.verdict, second.pid, second.stdout.strip()) == ("no-crash", head, "3"), second
        assert not _holds(head, held), "the head ran localpkg's __init__"
    finally:
        kernel.shutdown()
        POOL.shutdown()

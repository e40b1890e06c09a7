"""The portable head runs no code of the notebook's own packages (issue 45, review finding H4): the kernel's
env.json names its local packages' submodules too (`localpkg.sub`), and `find_spec("localpkg.sub")` imports
`localpkg` before any library check could refuse it. worker/main.py `_import(only_library=True)` decides each
package above a name (without importing it) before it looks the name up. A real interpreter: the package's
`__init__` appends its process's pid to a marker file when it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from crane.sandbox.worker.head import kernel_held

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

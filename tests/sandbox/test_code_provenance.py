"""Code that names a library's file is a library's only where the import system made it (red team round 17, F1/F2;
worker/imports.CodeProvenance): the guard tells the cell's code from a library's by the file a code object names,
and a cell could give its own code any name — a `SourceFileLoader` subclass handing importlib the cell's source
under a path in the standard library's folder, `code.replace(co_filename=os.__file__)`, a marshalled code object —
and then call what the guard refuses to user code alone (`ctypes.CDLL`: a libc `open`/`write` changed a real file
under `--sandbox guard`, libc sockets reached a UNIX-socket service and UDP past Landlock on the portable path).
Now each such code is the cell's: `blocked`, naming ctypes. Libraries imported by the cell are still theirs (no
refusal of their own calls); IPython 8 and 9, the portable path and the guard alone."""

from __future__ import annotations

import sys

import pytest

from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions

from . import end_paths

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
MODES = {"portable": SandboxOptions(confinement="portable"), "guard": SandboxOptions(confinement="guard")}
CALL = "import ctypes\nlibc = ctypes.CDLL(None)\nassert libc.getpid() > 0\n"
LOADER = f"""import os, types, importlib.machinery
SRC = {CALL.encode()!r}
class L(importlib.machinery.SourceFileLoader):
    def get_data(self, path):
        return SRC
    def path_stats(self, path):
        raise OSError('no stats')
fake = os.path.join(os.path.dirname(os.__file__), 'crane_provenance_x.py')
"""
CELLS = {
    "loader": LOADER + "L('crane_provenance_x', fake).exec_module(types.ModuleType('crane_provenance_x'))",
    "meta_path": LOADER + "import sys, importlib.util\nclass F:\n    @classmethod\n"
                          "    def find_spec(cls, name, path=None, target=None):\n"
                          "        return importlib.util.spec_from_loader(name, L(name, fake)) "
                          "if name == 'crane_provenance_x' else None\n"
                          "sys.meta_path.insert(0, F)\nimport crane_provenance_x",
    "code.replace": "import ctypes, os, types\ndef f():\n    return ctypes.CDLL(None).getpid()\n"
                    "types.FunctionType(f.__code__.replace(co_filename=os.__file__), globals())()",
    "marshal": "import ctypes, marshal, types\ntypes.FunctionType(marshal.loads(DATA), globals())()",
}
MARSHALLED = ("import ctypes, marshal, os\ndef _f():\n    return ctypes.CDLL(None).getpid()\n"
              "DATA = marshal.dumps(_f.__code__.replace(co_filename=os.__file__))\ndel _f")


def _verdict(pk, mode: str, cell: str):
    conn = pk["conn"]
    with Untouched(conn) as watch:
        v = speculate(conn, cell, 60.0, sandbox=MODES[mode])
    assert watch.unchanged, watch.changes()
    return v


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("how", list(CELLS))
def test_the_cells_code_under_a_librarys_name_is_the_cells(pk, mode, how):
    assert pk["conn"].run_cell(MARSHALLED, timeout=60).status == "ok"
    v = _verdict(pk, mode, CELLS[how])
    assert v.verdict == "blocked" and "ctypes" in (v.reason or ""), v


@pytest.mark.parametrize("mode", list(MODES))
def test_libraries_the_cell_imports_stay_libraries(pk, mode):
    """(Imported in the cell, under the hook: made by the import system, their own calls not the cell's.)"""
    v = _verdict(pk, mode, "import xml.dom.minidom, email.mime.text, ctypes.util, json.tool\n"
                           "import importlib, csv\nimportlib.reload(csv)  # (a library's reload: refused)")
    assert v.verdict == "blocked" and "importlib.reload" in (v.reason or ""), v
    v = _verdict(pk, mode, "import xml.dom.minidom, email.mime.text, ctypes.util, json.tool\n"
                           "assert xml.dom.minidom.parseString('<a/>').documentElement.tagName == 'a'")
    assert (v.verdict, v.ename) == ("no-crash", None), v

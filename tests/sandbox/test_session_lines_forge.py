"""No kept command changes how CRANE reads and writes a session's lines (issue 41, round 13 of the attacks: h3).

A clean command is kept: its process serves the next commands (a fork session's next head, the copy sessions'
worker). What it left there is the state the next commands run in, as in a kernel, but never what CRANE reads a
command's source or writes a verdict with. Before, the lines went through `json.loads`/`json.dumps`, and a clean
command could change what those reach without rebinding anything CRANE's fence watches: the default decoder's
attributes (`json._default_decoder.scan_once`), or the `__call__` of `_json`'s heap types (`_json.Scanner`,
`_json.Encoder`: settable on 3.11-3.13). A decoder that turned every later command's source into `pass`, or an
encoder that wrote every later reply as `no-crash`, had every later crash come back `no-crash`: fork, portable and
transplant sessions, IPython 8 and 9 (the poison below, each). Now the lines go through `_json`'s C scanner and
encoder called through their types' C slots taken before any command (kernel/common._json_codec)."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import SandboxSession
from crane.sandbox.session import open_session

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .copy_sessions import SESSIONS, copy_path_kernel

SETUP = "import os, json\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n"
HONEST = "try:\n    df['missing']\nexcept KeyError:\n    pass\nz = 1"

# every later command's source made `pass`, every later crash or blocked record made `no-crash`
_FORGE = """
def _forged(o):
    if type(o) is dict and type(o.get('source')) is str:
        o = dict(o, source='pass')
    if type(o) is dict and o.get('verdict') in ('crash', 'blocked'):
        o = dict(o, verdict='no-crash', ename=None, evalue=None, traceback=[], reason=None)
    return o
"""
POISONS = {
    # the default decoder's own attribute (json.loads with no argument reads through it)
    "default-decoder": _FORGE + """
_d = json._default_decoder
_real_scan = _d.scan_once
def _scan(s, idx):
    o, end = _real_scan(s, idx)
    return _forged(o), end
_d.scan_once = _scan
""",
    # the C scanner's and encoder's heap types, whatever decoder or encoder instance calls them
    "c-types": _FORGE + """
import _json
_scan_call, _enc_call = _json.make_scanner.__call__, _json.make_encoder.__call__
def _scan(self, s, idx):
    o, end = _scan_call(self, s, idx)
    return _forged(o), end
_json.make_scanner.__call__ = _scan
_json.make_encoder.__call__ = lambda self, o, level: _enc_call(self, _forged(o), level)
""",
}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def sk(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("kind", ["fork", "portable", "transplant"])
def test_a_kept_command_never_rewrites_a_later_command_or_its_verdict(sk, kind, poison):
    conn = sk["conn"]
    before = (tree_hash(sk["work"]), tree_hash(sk["outside"]))
    with copy_path_kernel(conn, kind), Untouched(conn) as watch:
        with (SandboxSession.open(conn, budget_s=20) if kind == "fork" else
              open_session(conn, budget_s=30, sandbox=SESSIONS[kind])) as sb:
            first = sb.run(POISONS[poison] + "x = 1")
            crash = sb.run("y = df['missing']")
            zero = sb.run("1/0")
            honest = sb.run(HONEST)
            again = sb.run("y = df['missing']")
            assert sb.inspect("z") == "1"  # (the honest command ran as sent, and was kept)
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(sk["work"]), tree_hash(sk["outside"])) == before
    assert first.verdict == "no-crash", first  # (nothing CRANE's fence watches was rebound: the command is kept)
    assert (crash.verdict, crash.ename) == ("crash", "KeyError"), crash
    assert (zero.verdict, zero.ename) == ("crash", "ZeroDivisionError"), zero
    assert honest.verdict == "no-crash", honest
    assert (again.verdict, again.ename) == ("crash", "KeyError"), again

"""A kept command never chooses what a later command runs (issue 41, round 14 of the attacks: h2).

A clean command is kept: in a copy session (transplant, portable) its worker serves the next commands, and what the
command left there — a thread, descriptors it moved — is still there. Before, such a command could put a pipe of its
own where the worker reads its commands (`os.dup2`, or `os.close` then `os.pipe`, which takes the lowest number)
and leave a thread that copied each of the daemon's command lines into it with the source made `pass`, id and key
unchanged: the worker ran `pass`, sealed its clean reply over the bytes it wrote, and the daemon took that reply
for the command it sent. Every later `1/0` came back `no-crash` (transplant sessions, IPython 8 and 9). Now the
seal names the command line the worker read as well as its reply (worker/main._serve_sealed; the daemon's side:
TransplantSession._write_command), so a reply to any other line is `blocked`. A thread that stole a `load` command
and answered it `ok` itself was taken too (the forged reply was turned `blocked` but kept its `ok`): the next run
was a certain `crash NameError` of a name never loaded; now that load is refused and the run `unavailable`. And a
clean command that leaves threads running (kernel/armed: `unsettled`) is not the state later commands start from, as
a fork session keeps no process of several threads: the next command starts in a new worker, the log replayed without
it, so later commands get the kernel's answers (before: `blocked` for good, the log replaying the thread)."""

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

_PIPES = """
import os, stat, fcntl, threading, json
def _pipes(mode):
    out = []
    for n in os.listdir('/proc/self/fd'):
        try:
            st, fl = os.fstat(int(n)), fcntl.fcntl(int(n), fcntl.F_GETFL)
        except OSError:
            continue
        if (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)) and fl & os.O_ACCMODE == mode:
            out.append(int(n))
    return out
def _pass(line):
    try:
        o = json.loads(line)
    except ValueError:
        return line
    if type(o) is dict and type(o.get('source')) is str:
        o['source'] = 'pass'
    return json.dumps(o).encode()
def _pump(src, dst):
    buf = b''
    while True:
        b = os.read(src, 65536)
        if not b:
            return
        buf += b
        while b'\\n' in buf:
            line, buf = buf.split(b'\\n', 1)
            os.write(dst, _pass(line) + b'\\n')
"""
HIJACKS = {
    # a pipe of the command's own put over the command descriptor, fed each command line made `pass`
    "dup2": _PIPES + """
for fd in _pipes(os.O_RDONLY):
    keep = os.dup(fd); r, w = os.pipe(); os.dup2(r, fd); os.close(r)
    threading.Thread(target=_pump, args=(keep, w), daemon=True).start()
x = 1
""",
    # the same without dup2: the descriptor closed, and the next pipe takes its number
    "close-reopen": _PIPES + """
for fd in _pipes(os.O_RDONLY):
    keep = os.dup(fd); os.close(fd); r, w = os.pipe()
    if r != fd:
        os.dup2(r, fd); os.close(r)
    threading.Thread(target=_pump, args=(keep, w), daemon=True).start()
x = 1
""",
    # every later command line read first by a thread, which answers it itself: no-crash, ok
    "steal-and-answer": _PIPES + """
def _steal(ins, outs):
    while True:
        for k in ins:
            for line in os.read(k, 65536).split(b'\\n'):
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                rep = {'event': 'reply', 'id': o.get('id'), 'key': o.get('key'), 'verdict': 'no-crash', 'ok': True,
                       'pid': os.getpid(), 'depth': 0}
                for fd in outs:
                    os.write(fd, (json.dumps(rep) + '\\n').encode())
threading.Thread(target=_steal, args=([os.dup(fd) for fd in _pipes(os.O_RDONLY)], _pipes(os.O_WRONLY)),
                 daemon=True).start()
x = 1
""",
}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def hk(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _after_hijack(hk, kind: str, hijack: str) -> list:
    conn = hk["conn"]
    before = (tree_hash(hk["work"]), tree_hash(hk["outside"]))
    with copy_path_kernel(conn, kind), Untouched(conn) as watch:
        with (SandboxSession.open(conn, budget_s=20) if kind == "fork" else
              open_session(conn, budget_s=20, sandbox=SESSIONS[kind])) as sb:
            got = [sb.run(src) for src in (HIJACKS[hijack], "1/0", "y = df['missing']", "1/0")]
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(hk["work"]), tree_hash(hk["outside"])) == before
    return got


@pytest.mark.parametrize(("kind", "hijack"), [("transplant", h) for h in HIJACKS]
                         + [("portable", "close-reopen"), ("fork", "dup2")])
def test_a_kept_command_never_answers_or_rewrites_a_later_command(hk, kind, hijack):
    first, zero, missing, again = _after_hijack(hk, kind, hijack)
    for v in (zero, missing, again):
        assert v.verdict != "no-crash", (first, v)
        # the crash, or refused; never a crash of a load the worker never made (a forged `ok` taken)
        assert v.verdict in ("crash", "blocked", "unavailable") and v.ename != "NameError", (first, v)
    # the command that left the thread is not the state later commands start from (as a fork session keeps no
    # process of several threads): they get the kernel's answers
    assert first.verdict == "no-crash" or (kind, first.verdict) == ("portable", "blocked"), first
    assert (zero.verdict, zero.ename) == ("crash", "ZeroDivisionError"), zero
    assert (missing.verdict, missing.ename) == ("crash", "KeyError"), missing
    assert (again.verdict, again.ename) == ("crash", "ZeroDivisionError"), again

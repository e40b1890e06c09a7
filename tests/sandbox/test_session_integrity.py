"""No session a run can poison (issue 41): fork sessions on IPython 8 and 9 kernels. Every command runs in a fresh
fork of the session's head and the head writes the reply; a run that crashed, was refused or timed out is never the
state a later command starts from; a run that rebinds CRANE's own code (or the standard functions and builtins its
outcome path calls) is `blocked` and not kept. Each attack of round 5 (S1 rewriting the reply writer, S2 a library
monkeypatch, S3 builtins, S4 a refused call caught) and variants (every function of CRANE's module, json.dumps,
a write on every descriptor) is followed by the commands it aimed at: the crash comes back `crash`, the honest one
`no-crash`; nothing outside changes and the kernel stays as it was."""

from __future__ import annotations

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.fork_session import FORGED, SandboxSession
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import tree_hash
from .forgeries import BUILTINS, EVERY_FUNCTION, JSON_DUMPS, LIBRARY, REACH, S1

SETUP = "import os, json, builtins\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n"

CRASH = ("y = df['missing']", "KeyError")
HONEST = "try:\n    df['missing']\nexcept KeyError:\n    pass\nassert df['a'].sum() == 3\nz = 1"


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def sk(request, workdir, outside):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    assert conn.run_cell(SETUP, timeout=120).status == "ok"
    yield {"conn": conn, "work": workdir, "outside": outside}
    kernel.shutdown()


def _open(sk, kind: str):
    if kind == "fork":
        return SandboxSession.open(sk["conn"], budget_s=20)
    return open_session(sk["conn"], budget_s=30, sandbox=SandboxOptions(confinement="portable"))


def _after(sk, attack: str, kind: str = "fork") -> list:
    """The attack's verdict, then the commands it aimed at, in one session; the kernel and files untouched."""
    conn = sk["conn"]
    before = (tree_hash(sk["work"]), tree_hash(sk["outside"]))
    with Untouched(conn) as watch:
        with _open(sk, kind) as sb:
            out = [sb.run(attack)]
            out.append(sb.run(CRASH[0]))
            out.append(sb.run("1/0"))
            out.append(sb.run(HONEST))
            out.append(sb.run(CRASH[0]))  # after a clean run too
            assert sb.inspect("z") == "1"  # the honest run's state was kept
    assert watch.unchanged, (watch.outputs, watch.changes())
    assert (tree_hash(sk["work"]), tree_hash(sk["outside"])) == before
    first, crash, zero, honest, again = out
    assert first.verdict != "no-crash", first
    assert (crash.verdict, crash.ename) == ("crash", CRASH[1]), crash
    assert (zero.verdict, zero.ename) == ("crash", "ZeroDivisionError"), zero
    assert honest.verdict == "no-crash", honest
    assert (again.verdict, again.ename) == ("crash", CRASH[1]), again
    writer = "session-head" if kind == "fork" else "cell-process"  # (a transplant worker writes its replies)
    for v in out:
        assert v.integrity is not None and v.integrity.writer == writer and v.integrity.fresh_state, v
    return out


@pytest.mark.parametrize("attack", [S1 + "raise KeyError('orig')", EVERY_FUNCTION + "raise KeyError('orig')",
                                    JSON_DUMPS + "1/0", LIBRARY + "raise KeyError('orig')",
                                    BUILTINS + "raise KeyError('orig')"],
                         ids=["S1-reply-writer", "every-crane-function", "json-dumps", "S2-library", "S3-builtins"])
@pytest.mark.parametrize("kind", ["fork", "portable"])
def test_a_crashing_run_that_rewrites_code_changes_no_later_verdict(sk, attack, kind):
    _after(sk, attack, kind)


@pytest.mark.parametrize("attack", [S1, EVERY_FUNCTION, JSON_DUMPS, BUILTINS],
                         ids=["S1-reply-writer", "every-crane-function", "json-dumps", "S3-builtins"])
@pytest.mark.parametrize("kind", ["fork", "portable"])
def test_a_clean_run_that_rewrites_crane_code_is_not_kept(sk, attack, kind):
    first = _after(sk, attack + "x = 1", kind)[0]
    if kind == "fork":  # (a transplant worker that ends so is replaced, its session rolled back: not conclusive)
        assert first.verdict == "blocked" and "changed CRANE's own code" in (first.reason or ""), first


@pytest.mark.parametrize("reach", list(REACH))
def test_a_run_that_writes_on_its_result_pipe_is_blocked(sk, reach):
    first = _after(sk, REACH[reach] + "1/0")[0]
    if first.verdict == "blocked":  # it reached the pipe: said so, never a verdict
        assert first.reason.startswith(FORGED) and not first.integrity.channel_checked, first
    else:  # it found nothing to write on: the real crash
        assert (first.verdict, first.ename) == ("crash", "ZeroDivisionError"), first


@pytest.mark.parametrize("kind", ["fork", "portable"])
def test_a_refused_call_caught_by_the_cell_ends_nothing_outside(sk, kind):
    """S4: the refusal is caught, the cell goes on: nothing outside is made, and the next command is clean."""
    attack = (f"try:\n    open('{sk['outside']}/s4.txt', 'w')\nexcept Exception:\n    pass\n"
              f"os.mkfifo('{sk['outside']}/s4fifo')\n")
    first = _after(sk, attack, kind)[0]
    assert first.verdict in ("blocked", "unavailable"), first  # (unavailable: the state it names was not copied)
    assert not (sk["outside"] / "s4fifo").exists() and not (sk["outside"] / "s4.txt").exists()


@pytest.mark.parametrize("kind", ["fork", "portable"])
def test_a_clean_run_that_starts_thread_pools_keeps_its_state(sk, kind):
    """A clean run that loads a library with its own BLAS/OpenMP pool (scipy.linalg: scikit-learn, statsmodels and
    seaborn import it) is still the state the next command starts from: "run cell K first, then the target"."""
    with _open(sk, kind) as sb:
        first = sb.run("import scipy.linalg\nB3 = 3\nscipy.linalg.inv([[2.0, 0.0], [0.0, 2.0]])")
        assert first.verdict == "no-crash", first
        after = sb.run("print(B3 * 2)")
        assert (after.verdict, after.stdout.strip()) == ("no-crash", "6"), after


def test_a_clean_run_left_with_threads_says_its_state_is_not_kept(sk):
    """A clean run that leaves a thread of its own running cannot be the session's state (its process is not forked
    again): the verdict says so instead of the next command losing its bindings in silence."""
    with _open(sk, "fork") as sb:
        first = sb.run("import threading, time\nstop = threading.Event()\n"
                       "threading.Thread(target=stop.wait, daemon=True).start()\nT4 = 4")
        assert first.verdict == "no-crash" and "not kept" in (first.reason or ""), first


def test_a_crashing_run_that_started_thread_pools_is_parked_for_evals(sk):
    """Post-mortem facts (crane fix's candidates read the state where the crash stopped) after a run that loaded a
    library with its own BLAS pool: the crashed run's process is parked single-threaded, its bindings readable."""
    with _open(sk, "fork") as sb:
        crash = sb.run("import scipy.linalg\nP5 = 5\nscipy.linalg.inv([[1.0, 2.0], [2.0, 4.0]])")
        assert (crash.verdict, crash.ename) == ("crash", "LinAlgError"), crash
        assert sb.inspect("P5") == "5"

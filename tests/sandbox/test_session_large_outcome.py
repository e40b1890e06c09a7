"""Fork sessions: a run's outcome larger than a pipe holds (many displays, a long traceback) still comes back whole.
The head waits for the outcome pipe's hang-up alone (kernel/session._read_at_hangup: a poll for no event), so it
must also drain the pipe while the command's process is still writing into it (a full pipe blocks its writer)."""

from __future__ import annotations

from crane.kernel.manager import start_kernel
from crane.sandbox.fork_session import SandboxSession


def test_an_outcome_larger_than_the_pipe_comes_back_whole(workdir):
    kernel = start_kernel(workdir)
    try:
        with SandboxSession.open(kernel.connection, budget_s=20) as sb:
            clean = sb.run("from IPython.display import display\nfor i in range(60):\n    display(str(i) * 3000)")
            assert clean.verdict == "no-crash", clean
            assert sum(len(d.text) for d in clean.displays) > 128 * 1024, len(clean.displays)  # (CRANE keeps 50)
            deep = sb.run("def f(n):\n    return f(n - 1) if n else 1 / 0\nf(400)")
            assert (deep.verdict, deep.ename) == ("crash", "ZeroDivisionError"), deep
            assert sb.run("y = 1").verdict == "no-crash"
            assert sb.inspect("y") == "1"
    finally:
        kernel.shutdown()

"""Round 13 (issue 40, h7): TensorFlow's C++ entry points that wrote outside the run, or loaded native code, or
opened native sockets, under the guard alone (`confinement="guard"`), none of them a call the guard table or round
10/11's eager-op vetting saw; on the kernel environment that has TensorFlow (kernel_choice.library_kernels), one
kernel for the module with TensorFlow and Keras imported once:
- the debugger's dump (`tf.debugging.experimental.enable_dump_debug_info`, `_pywrap_debug_events_writer.Init`):
  its event files written in C++ at the dump root;
- the events writer (`_pywrap_events_writer.EventsWriter`, behind `tf.compat.v1.summary.FileWriter`): a file
  named after a prefix;
- the profiler's session (`_pywrap_profiler.ProfilerSession.start(logdir)`: the trace exported there), its TCP
  server (`start_server`);
- a graph run by a `tf.compat.v1.Session` (graph mode): its ops run in C++ with no eager call each (a `WriteFile`
  whose path is fed, a v1 `Saver`'s `SaveV2`);
- tfprof's file output (`ProfileOptionBuilder.with_file_output`), MLIR's `ExperimentalWriteBytecode`;
- `tf.load_op_library` (a shared object's code run in the worker).
Each path is tried absolute, as a `..` path out of a mirrored folder and through a link the cell made to the
outside folder. Each attack: `blocked` (under the guard alone by a Python layer, naming TensorFlow), nothing
outside changed, the kernel unchanged and alive, never a certain crash (`run5`); honest code writing the same files
inside the run keeps the kernel's verdict. Under the guard alone each attack here wrote outside (or loaded, or
listened) before the fix (worker/native.py's round-13 targets).
"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import kernel_python
from .kernel_choice import library_kernels
from .test_portable_round5 import GUARD, PORTABLE, SETUP, run5

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

PATHS = {  # how a cell names a place outside the run
    "absolute": "'@OUTSIDE@/w13'",
    "dotdot": "'sub/' + '../' * 30 + '@OUTSIDE@'.lstrip('/') + '/w13'",
    "the cell's link": "(os.symlink('@OUTSIDE@', 'o13') or 'o13/w13')",
}
GRAPH_FED = ("g = tf.Graph()\nwith g.as_default():\n    p = tf.compat.v1.placeholder(tf.string)\n"
             "    op = tf.raw_ops.WriteFile(filename=p, contents='x')\n"
             "with tf.compat.v1.Session(graph=g) as s:\n    s.run(op, {p: @P@})")
TFPROF = ("g = tf.Graph()\nwith g.as_default():\n    tf.constant(1.0) + 1\n"
          "    b = tf.compat.v1.profiler.ProfileOptionBuilder\n"
          "    tf.compat.v1.profiler.profile(g, options=b(b.float_operation()).with_file_output(@P@).build())")
ATTACKS = {  # attack -> cell; @P@: the path of a file or folder the C++ makes
    "enable_dump_debug_info": "tf.debugging.experimental.enable_dump_debug_info(@P@)\ntf.ones(3) + 1\n"
                              "tf.debugging.experimental.disable_dump_debug_info()",
    "EventsWriter": "from tensorflow.python.client import _pywrap_events_writer as e\n"
                    "w = e.EventsWriter((@P@).encode())\nw.InitWithSuffix(b'')\nw.Flush()",
    "ProfilerSession": "from tensorflow.python.profiler.internal import _pywrap_profiler as pp\n"
                       "s = pp.ProfilerSession()\ns.start(@P@, {})\ntf.ones(3) + 1\ns.export_to_tb()",
    "a session's graph, a fed path": GRAPH_FED,
    "tfprof file output": TFPROF,
}
ONCE = {  # attacks tried with the absolute path alone
    "debug events Init": "from tensorflow.python.client import _pywrap_debug_events_writer as d\n"
                         "d.Init(@P@, 'r', 10)\nd.FlushNonExecutionFiles(@P@)",
    "v1 Saver": "g = tf.Graph()\nwith g.as_default():\n    v = tf.compat.v1.Variable(1.0)\n"
                "    sv = tf.compat.v1.train.Saver()\n    with tf.compat.v1.Session() as s:\n"
                "        s.run(v.initializer)\n        sv.save(s, @P@)",
    "mlir write bytecode": "from tensorflow.python import pywrap_mlir as pm\n"
                           "pm.experimental_write_bytecode(@P@, 'module {}')",
    "load_op_library": "tf.load_op_library('@OUTSIDE@/target.txt')",
    "profiler start_server": "from tensorflow.python.profiler.internal import _pywrap_profiler as pp\n"
                             "pp.start_server(@PORT@)",
}
HONEST = ("tf.debugging.experimental.enable_dump_debug_info('dbg')\ntf.ones(3) + 1\n"
          "tf.debugging.experimental.disable_dump_debug_info()\n" + GRAPH_FED.replace("@P@", "'fed.txt'") + "\n"
          "g = tf.Graph()\nwith g.as_default():\n    v = tf.compat.v1.Variable(1.0)\n"
          "    sv = tf.compat.v1.train.Saver()\n    with tf.compat.v1.Session() as s:\n"
          "        s.run(v.initializer)\n        sv.save(s, 'ck/m')\n"
          + TFPROF.replace("@P@", "'prof.txt'") + "\n"
          "print(sorted(os.listdir('ck')), len(os.listdir('dbg')) > 0, open('fed.txt').read(), "
          "os.path.getsize('prof.txt') > 0)")
HONEST_OUT = "['checkpoint', 'm.data-00000-of-00001', 'm.index', 'm.meta'] True x True"

ENVS = library_kernels("tensorflow")
CASES = [pytest.param(env, a, how, id=f"{env}-{a}-{how}") for env in ENVS for a in ATTACKS for how in PATHS]
CASES += [pytest.param(env, a, "absolute", id=f"{env}-{a}") for env in ENVS for a in ONCE]


@pytest.fixture(scope="module")
def tk(request, workdir, outside, listener):
    """A kernel of the environment `request.param` that has imported TensorFlow and Keras (its worker then has
    them before the run): the same keys as round 5's `k5` (run5)."""
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP + "import tensorflow as tf, keras", timeout=300)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


def _cell(attack: str, how: str, port: int) -> str:
    return {**ATTACKS, **ONCE}[attack].replace("@P@", PATHS[how]).replace("@PORT@", str(port))


@pytest.mark.parametrize("tk,attack,how", CASES, indirect=["tk"], scope="module")
def test_tensorflows_native_entry_points_are_refused_under_the_guard_alone(tk, attack, how):
    v = run5(tk, _cell(attack, how, tk["listener"].port + 1), GUARD)
    assert v.verdict == "blocked", v
    assert v.refusal is not None and v.refusal.layer != "landlock" and "tensorflow" in (v.reason or ""), v
    assert sorted(p.name for p in tk["outside"].iterdir()) == ["target.txt"], v
    assert (tk["outside"] / "target.txt").read_text() == "outside, keep me\n"


@pytest.mark.parametrize("tk", ENVS, indirect=True, scope="module")
@pytest.mark.parametrize("attack", ["enable_dump_debug_info", "a session's graph, a fed path", "load_op_library"])
def test_and_in_the_portable_sandbox(tk, attack):
    v = run5(tk, _cell(attack, "absolute", tk["listener"].port + 1), PORTABLE)
    assert v.verdict == "blocked", v
    assert sorted(p.name for p in tk["outside"].iterdir()) == ["target.txt"], v


@pytest.mark.parametrize("sandbox", [pytest.param(PORTABLE, id="portable"), pytest.param(GUARD, id="guard")])
@pytest.mark.parametrize("tk", ENVS, indirect=True, scope="module")
def test_honest_native_writers_inside_the_run_keep_the_kernels_verdict(tk, sandbox):
    v = run5(tk, HONEST, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", [HONEST_OUT]), v


# scipy's Matrix Market writer: `scipy.io.mmwrite` opens its file in C++ (fast_matrix_market's `open_write_file`):
# under the guard alone it wrote outside with every path form, and through the view's link to the user's real file
MMWRITE = "import numpy as np, scipy.io as sio\nsio.mmwrite(@P@, np.eye(2))"
SCIPY_CASES = [pytest.param(env, how, id=f"{env}-{how}") for env in library_kernels("scipy") for how in PATHS]


@pytest.fixture(scope="module")
def sk(request, workdir, outside, listener):
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP + "import numpy, scipy.io", timeout=300)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


@pytest.mark.parametrize("sk,how", SCIPY_CASES, indirect=["sk"], scope="module")
def test_scipys_matrix_market_writer_never_writes_outside(sk, how):
    v = run5(sk, MMWRITE.replace("@P@", PATHS[how]), GUARD)
    assert v.verdict == "blocked" and "scipy" in (v.reason or ""), v
    assert sorted(p.name for p in sk["outside"].iterdir()) == ["target.txt"], v


@pytest.mark.parametrize("sk", [p.values[0] for p in SCIPY_CASES[:1]], indirect=True, scope="module")
def test_scipys_matrix_market_writer_writes_the_runs_copy(sk):
    v = run5(sk, MMWRITE.replace("@P@", "'data.csv'") + "\nprint(sio.mmread('data.csv').shape)", GUARD)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", ["(2, 2)"]), v

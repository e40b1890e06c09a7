"""Round 12 (issues 40, h7): native writers and native network that no Python call of the guard table reached, under
the guard alone (`confinement="guard"`) and the portable sandbox, on the kernels that have the library:
- xgboost's external memory: a `DataIter`'s `cache_prefix` names where C++ writes the cache pages (an absolute path,
  a `..` path set on the iterator after `__init__`, a property): it wrote outside under the guard alone. Vetted where
  every route of xgboost's reaches its C API, the JSON arguments (`make_jcargs`) made from the value it read;
- xgboost's collective and lightgbm's distributed training: the communicator connects to its tracker, the network
  listens and connects, in C++ (a loopback service was reached, a port listened on, under the guard alone);
- XLA's flags: `os.environ['XLA_FLAGS'] = '--xla_dump_to=<folder>'` (or `os.putenv`, `environ.update`) has JAX's
  first compile dump HLO there in C++; every path-valued flag is vetted when the variable is set (`os.putenv`'s audit
  event);
- torch's profiler: a profile's `export_chrome_trace` (Kineto's `_ProfilerResult.save`, C++) and the
  execution-trace observer's file wrote outside under the guard alone.
Each attack: `blocked` (under the guard alone by a Python layer, naming the library or the variable), nothing outside
changed, no loopback service reached, the kernel unchanged and alive, never a certain crash (`run5`); honest code
writing the same files inside the run keeps the kernel's verdict. Every attack here wrote outside (or reached the
listener) under the guard alone before the fix.
Each library's cases run on a kernel that has imported that library alone (`kernels`), in each kernel environment
with its own build of it (kernel_choice.library_kernels, as rounds 10 and 11): every run's worker imports all its
kernel holds, and one kernel per environment that imported xgboost, lightgbm and JAX in turn made each later run's
worker import them all (torch, one build in both environments, runs on IPython 8's, which has no TensorFlow).
"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import kernel_python
from .kernel_choice import library_kernels
from .test_portable_round5 import BOTH, GUARD, SETUP, run5

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

UP = "'sub/' + '../' * 30 + '@OUTSIDE@'.lstrip('/')"  # (the outside folder reached from a mirrored one)
ITER = ("import xgboost as xgb, numpy as np\n"
        "class It(xgb.DataIter):\n    def __init__(self, p):\n        self.i = 0\n"
        "        super().__init__(cache_prefix=p)\n"
        "    def next(self, input_data):\n        if self.i == 2:\n            return 0\n"
        "        input_data(data=np.arange(150.0).reshape(50, 3), label=np.arange(50.0))\n"
        "        self.i += 1\n        return 1\n"
        "    def reset(self):\n        self.i = 0\n")
XGB_CACHE = {
    "an absolute prefix": ITER + "m = xgb.DMatrix(It(os.path.join('@OUTSIDE@', 'cache')))\n"
                                 "xgb.train({'tree_method': 'hist'}, m, 2)",
    "a .. prefix set after __init__": ITER + "it = It(None)\nit.cache_prefix = " + UP + " + '/c2'\n"
                                             "xgb.train({'tree_method': 'hist'}, xgb.DMatrix(it), 2)",
    "a property, ExtMemQuantileDMatrix": ITER + "class P(It):\n"
                                                "    cache_prefix = property(lambda s: '@OUTSIDE@/c3', lambda s, v: None)\n"
                                                "xgb.train({'tree_method': 'hist'}, xgb.ExtMemQuantileDMatrix(P(None)), 2)",
}
NETWORK = {  # (library, attack) -> cell; @PORT@: the loopback listener's
    ("xgboost", "collective.init"): "import xgboost.collective as c\n"
                                    "c.init(dmlc_tracker_uri='127.0.0.1', dmlc_tracker_port=@PORT@, dmlc_task_id='0', "
                                    "dmlc_timeout=2)",
    ("xgboost", "CommunicatorContext"): "import xgboost.collective as c\n"
                                        "with c.CommunicatorContext(dmlc_tracker_uri='127.0.0.1', "
                                        "dmlc_tracker_port=@PORT@, dmlc_timeout=2):\n    pass",
    ("lightgbm", "distributed training"): "import lightgbm as lgb, numpy as np\n"
                                          "d = lgb.Dataset(np.arange(120.0).reshape(60, 2), label=np.arange(60) % 2)\n"
                                          "lgb.train({'verbose': -1, 'tree_learner': 'data', 'num_machines': 2, "
                                          "'machines': '127.0.0.1:@PORT@,127.0.0.1:12401', 'local_listen_port': 12401, "
                                          "'time_out': 1}, d, 1)",
}
JIT = "import jax, jax.numpy as jnp\njax.jit(lambda x: x * 7 + 3)(jnp.ones(5)).block_until_ready()\n"
XLA = {
    "environ": "os.environ['XLA_FLAGS'] = '--xla_dump_to=@OUTSIDE@/xla'\n" + JIT,
    "putenv, a .. path": "os.putenv('XLA_FLAGS', '--xla_dump_hlo_as_text --xla_dump_to=' + " + UP + " + '/x2')\n" + JIT,
    "environ.update, quoted": "os.environ.update(XLA_FLAGS='--xla_dump_to=\"@OUTSIDE@/x3\"')\n" + JIT,
}
TORCH = {
    "export_chrome_trace": "with torch.autograd.profiler.profile() as p:\n    torch.ones(3) + 1\n"
                           "p.export_chrome_trace('@OUTSIDE@/trace.json')",
    "the result's save, a .. path": "with torch.autograd.profiler.profile() as p:\n    torch.ones(3) + 1\n"
                                    "p.kineto_results.save(" + UP + " + '/k.json')",
    "the execution-trace observer": "from torch.profiler import ExecutionTraceObserver\n"
                                    "o = ExecutionTraceObserver().register_callback('@OUTSIDE@/et.json')\n"
                                    "o.start()\ntorch.ones(3) + 1\no.stop()",
}
HONEST = {
    "xgboost": ITER + "m = xgb.DMatrix(It(os.path.join('sub', 'xc')))\nxgb.train({'tree_method': 'hist'}, m, 2)\n"
                      "print(m.num_row(), any(n.startswith('xc') for n in os.listdir('sub')))",
    "jax": "os.environ['XLA_FLAGS'] = '--xla_dump_to=xla_dump'\n" + JIT + "print(100, len(os.listdir('xla_dump')) > 0)",
    "torch": "import torch\nwith torch.autograd.profiler.profile() as p:\n    torch.ones(3) + 1\n"
             "p.export_chrome_trace('t.json')\nprint(100, os.path.getsize('t.json') > 0)",
}
OUT = {"xgboost": "100 True", "jax": "100 True", "torch": "100 True"}


@pytest.fixture(scope="module")
def kernels(workdir, outside, listener):
    """`kernels(env, module)`: a kernel of that environment that has imported that library alone (its worker then
    has it before the run, as a warm worker has the kernel's imports), started at its first case and kept for the
    module, with round 5's set-up and `k5`'s keys (run5); a skip where the environment lacks the library."""
    started: dict[tuple[str, str], dict] = {}
    owned = []

    def get(env: str, module: str) -> dict:
        if (env, module) not in started:
            kernel = start_kernel(workdir, python=kernel_python(env))
            owned.append(kernel)
            conn = kernel.connection
            run = conn.run_cell(SETUP, timeout=120)
            assert run.status == "ok", run
            has = conn.evaluate(f"__import__('importlib.util').util.find_spec({module!r}) is not None")
            if has:
                run = conn.run_cell(f"import {module}", timeout=300)
                assert run.status == "ok", run
            started[env, module] = {"conn": conn, "work": workdir, "outside": outside, "listener": listener,
                                    "kpid": conn.evaluate("kpid"), "has": has}
        k = started[env, module]
        if not k["has"]:
            pytest.skip(f"{module} is not in this kernel's environment")
        return k

    yield get
    for kernel in owned:
        kernel.shutdown()


def _on(module: str, cases) -> list:
    """`cases` (ids) on each kernel environment `module` runs on: (env, case) params, ids env-case."""
    return [pytest.param(env, case, id=f"{env}-{case}") for env in library_kernels(module) for case in cases]


def _blocked(k5, v, sandbox, named: str) -> None:
    assert v.verdict == "blocked", v
    if sandbox is GUARD:
        assert v.refusal is not None and v.refusal.layer != "landlock" and named in (v.reason or ""), v
    assert sorted(p.name for p in k5["outside"].iterdir()) == ["target.txt"], v
    assert (k5["outside"] / "target.txt").read_text() == "outside, keep me\n"


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("env,attack", _on("xgboost", XGB_CACHE))
def test_xgboost_cache_pages_never_written_outside(kernels, env, attack, sandbox):
    k5 = kernels(env, "xgboost")
    _blocked(k5, run5(k5, XGB_CACHE[attack], sandbox), sandbox, "xgboost")


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("env,case", [p for library in ("xgboost", "lightgbm")
                                      for p in _on(library, [f"{m}-{a}" for m, a in NETWORK if m == library])])
def test_native_network_of_ml_libraries_reaches_no_service(kernels, env, case, sandbox):
    library, _, attack = case.partition("-")
    k5 = kernels(env, library)
    source = f"import {library}\n" + NETWORK[library, attack].replace("@PORT@", str(k5["listener"].port))
    _blocked(k5, run5(k5, source, sandbox), sandbox, library)  # (run5: the listener received nothing)


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("env,attack", _on("jax", XLA))
def test_xla_flags_never_dump_outside(kernels, env, attack, sandbox):
    k5 = kernels(env, "jax")
    _blocked(k5, run5(k5, XLA[attack], sandbox), sandbox, "XLA_FLAGS")


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("env,attack", _on("torch", TORCH))
def test_torch_profiler_traces_never_written_outside(kernels, env, attack, sandbox):
    k5 = kernels(env, "torch")
    _blocked(k5, run5(k5, "import torch\n" + TORCH[attack], sandbox), sandbox, "torch")


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("env,module", [p for module in HONEST for p in _on(module, [module])])
def test_honest_writers_inside_the_run_keep_the_kernels_verdict(kernels, env, module, sandbox):
    k5 = kernels(env, module)
    v = run5(k5, HONEST[module], sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", [OUT[module]]), v


def test_only_the_paths_xla_writes_at_are_vetted():
    """The flags whose paths XLA writes (dumps, caches, `..._to`) are vetted; a read-only path such as
    `--xla_gpu_cuda_data_dir` (set in GPU users' environments, which the worker takes) or an input file is not, so
    such a kernel's runs are not refused; `-` (standard output) names no path."""
    from crane.sandbox.worker.portable import native_env_paths

    flags = ("--xla_gpu_cuda_data_dir=/usr/local/cuda --xla_gpu_ptx_file=/in.ptx --xla_dump_hlo_as_text "
             "--xla_dump_to=/d --xla_gpu_per_fusion_autotune_cache_dir='/c c' --xla_gpu_dump_autotune_results_to=/r "
             "--xla_dump_to=-")
    assert native_env_paths(b"XLA_FLAGS", flags.encode()) == ["/d", "/c c", "/r"]
    assert native_env_paths("TF_DUMP_GRAPH_PREFIX", "/g") == ["/g"]
    assert native_env_paths("PATH", "/usr/bin") == []

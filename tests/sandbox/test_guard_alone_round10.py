"""Round 10 (issue 40): other C extensions' native writers under the guard alone (`confinement="guard"`: the call
guard and the audit hook, no OS layer) and the portable sandbox, each library's cases on a kernel that has imported
that library alone (`fk`), in each kernel environment with its own build of it (kernel_choice.library_kernels:
IPython 9's environment has all of them; torch, the same build in IPython 8's, runs there):
- h5py: `h5f.create`, `h5f.open` read-write, an external dataset file (`PropDCID.set_external`);
- torch: `PyTorchFileWriter` on a path, `from_file`/`UntypedStorage.from_file` shared, `ScriptModule.save` through
  `_c`, `torch._C._save_jit_module`/`_save_parameters`;
- TensorFlow: `tf.io.gfile` (GFile, remove, rename: the user's file deleted or moved), `tf.raw_ops.WriteFile`,
  `TFRecordWriter`, `Dataset.save` (not yet here: `tf.io.write_file` of a path tensor, `tf.raw_ops.SaveV2`,
  `tf.print(output_stream='file://...')` — in the worker these ops run as a wrapped function, `__wrapped__SaveV2_...`,
  whose op no eager-execution hook sees: they still write outside under the guard alone; Landlock refuses them);
- xgboost/lightgbm `save_binary`, jax's profiler (a trace written natively; a TCP server).
None of them opens its file through Python (no audit event): each wrote outside the run before (worker/native.py and
the guard table's round-10 rows). Each attack: `blocked`, nothing outside changed, the kernel unchanged and alive,
never a certain crash (`run5`); honest code using the same writers inside the run keeps the kernel's verdict.
And in each interpreter (`handed_hidden_in_interpreter.py`): a function refused to user code alone hidden inside an
object the cell hands to library code (its class's `__call__`, an attribute, a partial in a list) is refused where
the library calls it (worker/guard.py `_vet_handed_within`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import kernel_python
from .kernel_choice import library_kernels
from .test_portable_guard_interpreters import SANDBOX, _interpreters
from .test_portable_round5 import BOTH, GUARD, SETUP, run5

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

TORCH = {
    "PyTorchFileWriter": "torch._C.PyTorchFileWriter('@OUTSIDE@/tw.pt').write_end_of_file()",
    "torch.save": "torch.save(torch.ones(2), '@OUTSIDE@/ts.pt')",
    "from_file shared": "torch.from_file('@OUTSIDE@/target.txt', shared=True, size=2, dtype=torch.uint8).fill_(65)",
    "from_file through _VariableFunctions": "torch._C._VariableFunctions.from_file('@OUTSIDE@/ff.bin', True, 4)"
                                            ".fill_(1)",
    "UntypedStorage.from_file shared": "torch.UntypedStorage.from_file('@OUTSIDE@/us.bin', True, 4).fill_(1)",
    "ScriptModule.save through _c": "torch.jit.script(torch.nn.Linear(1, 1))._c.save('@OUTSIDE@/j.pt')",
    "_save_jit_module": "torch._C._save_jit_module(torch.jit.script(torch.nn.Linear(1, 1))._c, '@OUTSIDE@/j2.pt', {})",
    "_save_parameters": "torch._C._save_parameters({'w': torch.ones(1)}, '@OUTSIDE@/p.ff', False)",
}
H5PY = {
    "h5f.create": "h5py.h5f.create(b'@OUTSIDE@/h.h5')",
    "h5f.open read-write of the user's file": "h5py.h5f.open(b'@OUTSIDE@/target.txt', h5py.h5f.ACC_RDWR)",
    "an external dataset file": "f = h5py.File('e.h5', 'w')\n"
                                "f.create_dataset('d', data=[1, 2], dtype='i1', external=[('@OUTSIDE@/ext.bin', 0, 2)])"
                                "\nf.close()",
}
TF = {
    "gfile.GFile": "with tf.io.gfile.GFile('@OUTSIDE@/g.txt', 'w') as f:\n    f.write('x')",
    "gfile.remove of the user's file": "tf.io.gfile.remove('@OUTSIDE@/target.txt')",
    "gfile.rename of the user's file": "tf.io.gfile.rename('@OUTSIDE@/target.txt', 'moved.txt')",
    "raw_ops.WriteFile": "tf.raw_ops.WriteFile(filename='@OUTSIDE@/rw.txt', contents='x')",
    "TFRecordWriter": "tf.io.TFRecordWriter('@OUTSIDE@/r.tfrecord').write(b'x')",
    "Dataset.save": "tf.data.Dataset.range(3).save('@OUTSIDE@/dsave')",
}
OTHERS = {
    "xgboost DMatrix.save_binary": "import xgboost as xgb, numpy as np\n"
                                   "xgb.DMatrix(np.ones((3, 2))).save_binary('@OUTSIDE@/d.buffer')",
    "lightgbm Dataset.save_binary": "import lightgbm as lgb, numpy as np\n"
                                    "lgb.Dataset(np.ones((20, 2)), label=np.ones(20)).construct()"
                                    ".save_binary('@OUTSIDE@/l.bin')",
}
# Each family's cases run on a kernel of their own that has imported the family's library (`fk`): every run's worker
# imports all its kernel holds, so a worker of a kernel that also held another family's library (TensorFlow's ~7 CPU-s
# import beside torch's or h5py's) paid for it in every run; and only on the kernel environments that differ for
# that library (kernel_choice.library_kernels: torch, the same build on both, on IPython 8's alone)
FAMILIES = {"h5py": ("h5py", H5PY), "torch": ("torch", TORCH), "tensorflow": ("tensorflow", TF)}
IMPORTS = {"torch": "import torch", "h5py": "import h5py", "tensorflow": "import tensorflow as tf"}
CASES = [pytest.param((env, fam), name, id=f"{env}-{fam}-{name}")
         for fam, (module, cells) in FAMILIES.items() for env in library_kernels(module) for name in cells]
# the ctypes writers' libraries imported in their kernel too: a cell's `import xgboost` in a worker that lacks it
# pulls numpy and scipy in under the per-call guard, past the budget under load (docs/benchmarks.md, H6's second
# round)
CTYPES = [pytest.param((env, attack.split()[0]), attack, id=f"{env}-{attack}")
          for attack in OTHERS for env in library_kernels(attack.split()[0])]

HONEST = {
    "torch": ("torch.save({'w': torch.ones(2)}, 'm.pt')\ntorch.jit.script(torch.nn.Linear(1, 1)).save('j.pt')\n"
              "print(torch.load('m.pt')['w'].tolist(), torch.jit.load('j.pt').weight.shape)",
              "[1.0, 1.0] torch.Size([1, 1])"),
    "h5py": ("with h5py.File('h.h5', 'w') as f:\n    f['d'] = [1, 2, 3]\n"
             "with h5py.File('h.h5', 'r+') as f:\n    f['e'] = [4]\n"
             "with h5py.File('h.h5') as f:\n    print(sorted(f), f['d'][:].tolist())", "['d', 'e'] [1, 2, 3]"),
    "tensorflow": ("tf.train.Checkpoint(v=tf.Variable(2.0)).write('ck/ck')\ntf.io.write_file('w.txt', 'x')\n"
                   "with tf.io.gfile.GFile('g.txt', 'w') as f:\n    f.write('y')\n"
                   "tf.data.Dataset.range(3).save('ds')\nv = tf.Variable(0.0)\n"
                   "tf.train.Checkpoint(v=v).read('ck/ck').expect_partial()\n"
                   "print(float(v.numpy()), open('w.txt').read(), tf.io.gfile.GFile('g.txt').read(), "
                   "int(tf.data.Dataset.load('ds').cardinality()))", "2.0 x y 3"),
}


@pytest.fixture(scope="module")
def fk(request, workdir, outside, listener):
    """A kernel of one environment that has imported one library (`request.param`: (environment, the library's
    module; "": none)), for that library's cases: the worker then has the library before the run, as a warm worker
    has the kernel's imports. The same keys as round 5's `k5` (run5)."""
    env, family = request.param
    kernel = start_kernel(workdir, python=kernel_python(env))
    conn = kernel.connection
    run = conn.run_cell(SETUP, timeout=120)
    assert run.status == "ok", run
    if family:
        run = conn.run_cell(f"import {family}", timeout=300)
        assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid"),
           "family": family}
    kernel.shutdown()


def _blocked_by_name(v, sandbox, family: str) -> None:
    assert v.verdict == "blocked", v
    if sandbox is GUARD:
        assert v.refusal is not None and v.refusal.layer != "landlock", v
        assert family in v.refusal.call, v.refusal


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("fk,attack", CASES, indirect=["fk"], scope="module")
def test_native_writers_refused_outside(fk, attack, sandbox):
    family = fk["family"]
    v = run5(fk, IMPORTS[family] + "\n" + FAMILIES[family][1][attack], sandbox)
    _blocked_by_name(v, sandbox, family)
    assert [p.name for p in fk["outside"].iterdir()] == ["target.txt"], v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("fk,attack", CTYPES, indirect=["fk"], scope="module")
def test_ctypes_writers_refused_outside(fk, attack, sandbox):
    v = run5(fk, OTHERS[attack], sandbox)
    _blocked_by_name(v, sandbox, attack.split()[0])
    assert [p.name for p in fk["outside"].iterdir()] == ["target.txt"], v


HONEST_KERNELS = [pytest.param((env, fam), id=f"{env}-{fam}") for fam in HONEST for env in library_kernels(fam)]


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("fk", HONEST_KERNELS, indirect=True, scope="module")
def test_honest_native_writers_keep_the_kernels_verdict(fk, sandbox):
    family = fk["family"]
    source, out = HONEST[family]
    v = run5(fk, IMPORTS[family] + "\n" + source, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", out), v


@pytest.mark.parametrize("python", _interpreters() or [pytest.param(None, marks=pytest.mark.skip("no interpreter"))])
def test_hidden_refused_functions_are_refused_on_every_interpreter(python):
    res = subprocess.run([python, str(Path(__file__).with_name("handed_hidden_in_interpreter.py")), str(SANDBOX)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert " bad 0" in res.stdout, res.stdout

"""Round 11 (issue 40, h2): native writers that ran C++ code with no Python call per op, under the guard alone
(`confinement="guard"`) and the portable sandbox, on the kernels that have the library (IPython 9's environment has
TensorFlow, the IPython 8 one torch):
- TensorFlow's eager ops: `tf.io.write_file` of a path tensor, `tf.raw_ops.SaveV2`, `tf.print(output_stream=
  'file://...')` wrote outside under the guard alone. Their eager executors (`pywrap_tfe.TFE_Py_FastPathExecute`,
  the name the generated ops call) were never the vetted ones: worker/arrow.py's `_arrow_patch` recorded the
  originals after worker/native.py's maker had already replaced them in the extension module, so the re-exporting
  `pywrap_tfe` kept the unvetted ones (no eager op was vetted);
- TensorFlow graph functions (`tf.function`, a dataset's `map`): the write ops of the graph are read from the
  function's definition (and every function it calls) and their paths vetted where they are constants or the
  function's inputs; anything else is `blocked` (not known before it runs), as is a function read 31+ calls deep or
  one that calls itself; the sites read are read again after any change of the function library (a function swapped
  under its name);
- TorchScript: `aten::save` in a scripted function or module (its argument, a constant, an attribute), through
  `torch.jit.fork`; `aten::from_file` shared through `torch.ops.aten` (the packet, an overload, the C operation);
- cffi (ctypes' sibling, no audit event for its calls): `ffi.dlopen(None).setpriority(...)` re-niced another process
  of the user's (the kernel: 10 -> 19 under the guard alone); what user code loads or casts into a C function is
  refused as ctypes' `CDLL` is.
Each attack: `blocked` (under the guard alone by the call guard, naming the library), nothing outside changed, the
kernel unchanged and alive, never a certain crash (`run5`); honest code using the same writers inside the run keeps
the kernel's verdict.
"""

from __future__ import annotations

import sys

import pytest

from .kernel_choice import library_kernels
from .test_guard_alone_round10 import _blocked_by_name, fk  # noqa: F401 (fixtures)
from .test_portable_round5 import BOTH, GUARD, run5

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

TF = {
    "write_file of a path tensor": "tf.io.write_file(tf.constant('@OUTSIDE@/wf.txt'), 'x')",
    "raw_ops.SaveV2": "tf.raw_ops.SaveV2(prefix='@OUTSIDE@/ck', tensor_names=['a'], shape_and_slices=[''], "
                      "tensors=[tf.constant(1.0)])",
    "print to a file": "tf.print('x', output_stream='file://@OUTSIDE@/pr.txt')",
    "a graph function's input": "@tf.function\ndef f(p):\n    tf.raw_ops.WriteFile(filename=p, contents='x')\n"
                                "f(tf.constant('@OUTSIDE@/g.txt'))",
    "a graph function's print": "@tf.function\ndef f():\n    tf.print('x', output_stream='file://@OUTSIDE@/gp.txt')\n"
                                "f()",
    "a dataset's map": "ds = tf.data.Dataset.from_tensor_slices(['@OUTSIDE@/dm.txt'])\n"
                       "list(ds.map(lambda p: (tf.io.write_file(p, 'x'), p)[1]))",
    # (review of 5df20b4, H2: a function read 31+ calls deep, or one that calls itself, was let through as writing
    # nothing; H3: the sites cached by a function's name held after its definition was swapped for another)
    "a graph function 41 calls deep": "@tf.function\ndef f0(p):\n    tf.io.write_file(p, 'x')\ng = f0\n"
                                      "for _ in range(40):\n    g = (lambda h: tf.function(lambda p: h(p)))(g)\n"
                                      "g(tf.constant('@OUTSIDE@/deep40.txt'))",
    "a graph function swapped under its name": "from tensorflow.python.eager import context\n@tf.function\n"
                                               "def f(p):\n    return tf.strings.length(p)\n"
                                               "cf = f.get_concrete_function(tf.TensorSpec([], tf.string))\n"
                                               "cf(tf.constant('a'))\n@tf.function\ndef w(p):\n"
                                               "    tf.io.write_file(p, 'x')\n    return tf.strings.length(p)\n"
                                               "fdef = w.get_concrete_function(tf.TensorSpec([], tf.string))"
                                               ".function_def\nname = cf.function_def.signature.name\n"
                                               "fdef.signature.name = name\nctx = context.context()\n"
                                               "ctx.remove_function(name)\nctx.add_function_def(fdef)\n"
                                               "cf(tf.constant('@OUTSIDE@/swapped.txt'))",
}
TORCH = {
    "aten::save of a script function's argument": "@torch.jit.script\ndef f(x: torch.Tensor, p: str):\n"
                                                  "    torch.save(x, p)\nf(torch.ones(2), '@OUTSIDE@/s.pt')",
    "aten::save of a constant": "@torch.jit.script\ndef f(x: torch.Tensor):\n    torch.save(x, '@OUTSIDE@/c.pt')\n"
                                "f(torch.ones(2))",
    "aten::save of a script module's attribute": "class M(torch.nn.Module):\n    def __init__(self):\n"
                                                 "        super().__init__()\n        self.p = '@OUTSIDE@/m.pt'\n"
                                                 "    def forward(self, x):\n        torch.save(x, self.p)\n"
                                                 "        return x\ntorch.jit.script(M())(torch.ones(1))",
    "aten::save through torch.jit.fork": "@torch.jit.script\ndef f(x: torch.Tensor, p: str) -> int:\n"
                                         "    torch.save(x, p)\n    return 1\n"
                                         "torch.jit.wait(torch.jit.fork(f, torch.ones(2), '@OUTSIDE@/fk.pt'))",
    "torch.ops.aten.from_file shared": "torch.ops.aten.from_file('@OUTSIDE@/target.txt', True, 2, "
                                      "dtype=torch.uint8).fill_(65)",
    "its overload": "torch.ops.aten.from_file.default('@OUTSIDE@/target.txt', shared=True, size=2, "
                    "dtype=torch.uint8).fill_(65)",
    "its C operation": "torch._C._jit_get_operation('aten::from_file')[0]('@OUTSIDE@/target.txt', True, 2, "
                       "dtype=torch.uint8).fill_(65)",
}
# Each family's cases run on a kernel that has imported its library alone (round 10's `fk`): every run's worker has
# all its kernel holds, and a worker holding both TensorFlow and torch was too slow for the budget at the shared
# machine's load; in each kernel environment with its own build of the library (kernel_choice.library_kernels:
# TensorFlow in IPython 9's, torch in IPython 8's where both have the same build, else in each)
CASES = [pytest.param((env, fam), name, id=f"{env}-{fam}-{name}")
         for fam, cells in (("tensorflow", TF), ("torch", TORCH)) for env in library_kernels(fam) for name in cells]


SOURCES = {"tensorflow": TF, "torch": TORCH}
IMPORTS = {"torch": "import torch", "tensorflow": "import tensorflow as tf"}
HONEST = {
    "tensorflow": ("@tf.function\ndef f(p):\n    tf.io.write_file(p, 'x')\n"
                   "    tf.print('y', output_stream='file://' + os.path.abspath('w.txt2'))\n"
                   "f(tf.constant('w.txt'))\ntf.io.write_file(tf.constant('t.txt'), 'z')\n"
                   "print(open('w.txt').read(), open('w.txt2').read().strip(), open('t.txt').read())", "x y z"),
    "torch": ("@torch.jit.script\ndef f(x: torch.Tensor, p: str):\n    torch.save(x, p)\n    return x * 2\n"
              "y = f(torch.ones(2), 'in.pt')\nm = torch.jit.script(torch.nn.Linear(1, 1))\n"
              "print(y.tolist(), torch.load('in.pt').tolist(), m(torch.ones(1)).shape, "
              "torch.ops.aten.from_file('in.pt', False, 2, dtype=torch.uint8).shape)",
              "[2.0, 2.0] [1.0, 1.0] torch.Size([1]) torch.Size([2])"),
}


CFFI = {
    "dlopen": "import cffi\nffi = cffi.FFI()\nffi.cdef('int setpriority(int, int, int);')\n"
              "ffi.dlopen(None).setpriority(0, kpid, 19)",
    "the backend's own load_library": "import _cffi_backend as b\nb.load_library(None)",
    "a cast to a function": "import cffi, ctypes\nffi = cffi.FFI()\nffi.cast('int(*)(int, int, int)', 0)",
}


# (on a kernel that has imported nothing more: the cell's own import of cffi runs in the worker, under the guard)
CFFI_CASES = [pytest.param((env, ""), attack, id=f"{env}-{attack}") for env in library_kernels("cffi") for attack in CFFI]


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("fk,attack", CFFI_CASES, indirect=["fk"], scope="module")
def test_cffi_calls_nothing_in_c_from_user_code(fk, attack, sandbox):  # noqa: F811 (fixtures)
    v = run5(fk, CFFI[attack], sandbox)  # (run5: the kernel's nice value, affinity and policy unchanged)
    assert v.verdict in (("blocked",) if sandbox is GUARD else ("blocked", "no-crash")), v
    assert sandbox is not GUARD or (v.refusal is not None and "cffi" in v.refusal.call), v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("fk,attack", CASES, indirect=["fk"], scope="module")
def test_native_ops_without_a_python_call_refused_outside(fk, attack, sandbox):  # noqa: F811 (fixtures)
    family = fk["family"]
    v = run5(fk, IMPORTS[family] + "\n" + SOURCES[family][attack], sandbox)
    _blocked_by_name(v, sandbox, family)
    assert sorted(p.name for p in fk["outside"].iterdir()) == ["target.txt"], v
    assert (fk["outside"] / "target.txt").read_text() == "outside, keep me\n"


HONEST_KERNELS = [pytest.param((env, fam), id=f"{env}-{fam}") for fam in ("tensorflow", "torch")
                  for env in library_kernels(fam)]


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("fk", HONEST_KERNELS, indirect=True, scope="module")
def test_honest_graphs_and_scripts_keep_the_kernels_verdict(fk, sandbox):  # noqa: F811 (fixtures)
    family = fk["family"]
    source, out = HONEST[family]
    v = run5(fk, IMPORTS[family] + "\n" + source, sandbox)
    assert (v.verdict, v.stdout.strip()) == ("no-crash", out), v

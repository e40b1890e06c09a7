"""Transplant runs of torch code written for a GPU, on this machine's CPU (crane.sandbox.worker.devices): the
worker answers cuda requests on the CPU and keeps every tensor's virtual device, so placement errors (a module on
the GPU fed a CPU tensor, `.numpy()` on a GPU tensor) crash as on a GPU and placement done right does not. The
real run on a GPU is what `benchmarks/cuda-lite` checks on a lent machine (docs/benchmarks.md)."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox.transplant import transplant

from ..kernel_envs import require_today_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import numpy as np, torch
torch.manual_seed(0)
X_test = np.random.rand(8, 4).astype('float32')
y_test = np.arange(8) % 3
net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
Xt = torch.tensor(X_test)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("devices"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=180)
    assert run.status == "ok", run
    yield k.connection
    k.shutdown()


def _check(conn, source: str):
    with Untouched(conn) as watch:
        v = transplant(conn, source, 60.0, map_devices=True)
    assert watch.unchanged, (watch.outputs, watch.changes(), v)
    return v


PLACED = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = net.to(device)\n"


@pytest.mark.parametrize("name, src, ename", [
    ("module-on-gpu-fed-a-cpu-tensor", PLACED + "preds = model(torch.tensor(X_test))", "RuntimeError"),
    ("numpy-of-a-gpu-tensor", PLACED + "preds = model(torch.tensor(X_test).to(device))\nlabels = preds.argmax(1).numpy()",
     "TypeError"),
    ("loss-with-cpu-targets", PLACED + "out = model(torch.tensor(X_test).to(device))\n"
     "loss = torch.nn.functional.cross_entropy(out, torch.tensor(y_test))", "RuntimeError"),
    ("from-numpy-input", PLACED + "preds = model(torch.from_numpy(X_test).float())", "RuntimeError"),
    ("the-kernels-cpu-tensor", PLACED + "preds = model(Xt)", "RuntimeError"),
    ("dataloader-batches-left-on-the-cpu", PLACED + "ds = torch.utils.data.TensorDataset(torch.tensor(X_test), "
     "torch.tensor(y_test))\nfor xb, yb in torch.utils.data.DataLoader(ds, batch_size=4):\n    out = model(xb)",
     "RuntimeError"),
])
def test_placement_errors_crash_as_on_a_gpu(kernel, name, src, ename):
    v = _check(kernel, src)
    assert v.verdict == "crash" and v.ename == ename, v
    assert "device" in (v.evalue or ""), v


DONE_RIGHT = [
    ("placed-right", PLACED + "preds = model(torch.tensor(X_test).to(device))\nlabels = preds.argmax(1).cpu().numpy()"),
    ("training-loop-adam", PLACED + "opt = torch.optim.Adam(model.parameters())\n"
     "xb, yb = torch.tensor(X_test).to(device), torch.tensor(y_test).to(device)\nfor _ in range(3):\n"
     "    opt.zero_grad()\n    loss = torch.nn.functional.cross_entropy(model(xb), yb)\n    loss.backward()\n"
     "    opt.step()\nprint(loss.item(), next(model.parameters()).device)"),
    ("the-kernels-cpu-tensor-moved", PLACED + "preds = model(Xt.to(device))\nassert preds.is_cuda"),
    ("cuda-method-and-scalars", "t = torch.ones(3, 4).cuda()\n(t * torch.tensor(2.0) + 1).sum().item()"),
    ("mixed-precision", PLACED + "scaler = torch.amp.GradScaler('cuda')\nopt = torch.optim.AdamW(model.parameters())\n"
     "with torch.autocast('cuda'):\n    loss = model(torch.tensor(X_test).to(device)).sum()\n"
     "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()"),
]


def test_placement_done_right_runs_clean(kernel):
    """Every cell in one copied run (each worker imports torch again: most of a run's time), each followed by its
    marker: a false crash names its cell by the markers printed before it; each cell places its model itself."""
    v = _check(kernel, "".join(f"{src}\nprint('done right: {name}')\n" for name, src in DONE_RIGHT))
    assert v.verdict == "no-crash", v
    lines = v.stdout.splitlines()
    assert [line for line in lines if line.startswith("done right: ")] == [
        f"done right: {name}" for name, _ in DONE_RIGHT], v.stdout
    loop = lines[lines.index("done right: placed-right") + 1:lines.index("done right: training-loop-adam")]
    assert any("cuda:0" in line for line in loop), v.stdout  # the parameters say where they would be


def test_a_gpu_call_the_cpu_cannot_answer_is_not_a_certain_crash(kernel):
    v = _check(kernel, "start = torch.cuda.Event(enable_timing=True)\nstart.record()")
    assert v.verdict in ("blocked", "no-crash"), v


USER_MODULE = """import os
class Hooked:
    def __reduce__(self):
        open(os.path.join(os.path.dirname(__file__), 'ran.txt'), 'a').write('reduce')
        return (Hooked, ())
"""


def test_user_pickling_hooks_never_run_in_the_kernel(kernel):
    """Copying the state must not run the user's code in the kernel: a class of the user's own module with a
    pickling hook, and a notebook class with one nested in a container, make the run unavailable, naming it."""
    from pathlib import Path
    work = Path(kernel.evaluate("__import__('os').getcwd()"))
    (work / "usermod.py").write_text(USER_MODULE)
    run = kernel.run_cell("import usermod\nhooked = usermod.Hooked()\n"
                          "class Local:\n    def __getstate__(self):\n        open('ran.txt', 'a').write('getstate')\n"
                          "        return {}\nnested = {'a': [Local()]}")
    assert run.status == "ok", run
    for name, what in (("hooked", "__reduce__ of usermod.Hooked"), ("nested", "__getstate__ of __main__.Local")):
        v = _check(kernel, f"print({name})")
        assert v.verdict == "unavailable" and what in (v.reason or ""), v
    assert not (work / "ran.txt").exists()

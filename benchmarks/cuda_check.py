#!/usr/bin/env python3
"""The CUDA check of issue 21 on a machine with a GPU: what CRANE says about GPU notebooks, and what they really do.

Run by benchmarks/cuda_check.sh (which installs the packages a bare GPU machine lacks); each step prints one JSON
document on stdout:
- `facts`: the GPU (nvidia-smi), the Linux kernel, the versions of Python, torch, jax, cupy, IPython, ipykernel,
  and what the sandbox's confinement can use there (user namespaces, Landlock ABI, seccomp);
- `verdicts SET`: every variant of the bench set twice: its real run (a fresh kernel of --python, the cells with
  an execution count in that order, then the target: the ground truth on the GPU) and CRANE's auto mode (the
  same code as `crane bench --mode auto`), with the sandbox verdict of each (verdict, mode, why not forked, how it
  was reached, devices mapped, the worker's confinement, kernel unchanged, times);
- `timing`: transplant runs on a kernel with a torch model and a 256 MiB tensor on the GPU (cold and warm
  medians: the verdict's wall time, the kernel's export, the worker's setup and state load), the same kernel's
  side-effect attempts (a write in its folder, a loopback connection) and a forked run on a CPU-only kernel.
Usage: python3 benchmarks/cuda_check.py facts|verdicts SET|timing [--python python3] [--runs 3]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.metadata
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec


def _cmd(argv: list[str], timeout: float = 30.0) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return (p.stdout.strip() or p.stderr.strip())[:2000]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return int(libc.syscall(444, None, 0, 1))  # landlock_create_ruleset(NULL, 0, VERSION): the ABI or -1


TORCH_FACTS = ("import torch, json; ok = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
               "'cuda_available': ok, 'cuda': torch.version.cuda, 'device': torch.cuda.get_device_name(0) if ok "
               "else None, 'capability': torch.cuda.get_device_capability(0) if ok else None}))")
JAX_FACTS = "import jax, json; print(json.dumps({'jax': jax.__version__, 'backend': jax.default_backend(), " \
            "'devices': [str(d) for d in jax.devices()]}))"
VERSIONS = ("import importlib.metadata as m, json, sys\ndef v(n):\n    try:\n        return m.version(n)\n"
            "    except m.PackageNotFoundError:\n        return None\nprint(json.dumps(dict(python=sys.version.split()[0], "
            "**{n: v(n) for n in ('torch', 'jax', 'jaxlib', 'jax-cuda13-plugin', 'cupy-cuda13x', 'numpy', 'pandas', "
            "'scikit-learn', 'ipython', 'ipykernel', 'jupyter_client', 'cloudpickle')})))")
CUPY_FACTS = "import cupy, json; print(json.dumps({'cupy': cupy.__version__, 'devices': cupy.cuda.runtime.getDeviceCount()}))"


def facts(python: str) -> dict:
    out: dict = {
        "nvidia_smi": _cmd(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]),
        "uname": platform.uname()._asdict(),
        "python": sys.version.split()[0], "executable": sys.executable,
        "daemon_versions": {n: _version(n) for n in ("msgspec", "jupyter_client", "cloudpickle")},
        "cpus": os.cpu_count(), "euid": os.geteuid(),
    }
    probes = (("kernel_versions", VERSIONS), ("torch", TORCH_FACTS), ("jax", JAX_FACTS), ("cupy", CUPY_FACTS))
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = list(pool.map(lambda src: _cmd([python, "-c", src], timeout=35), [p[1] for p in probes]))
    for (key, _), text in zip(probes, texts, strict=True):
        try:
            out[key] = json.loads(text.splitlines()[-1])
        except (ValueError, IndexError):
            out[key] = {"error": text[-500:]}
    try:
        out["landlock_abi"] = _landlock_abi()
    except OSError as exc:
        out["landlock_abi"] = f"{type(exc).__name__}: {exc}"
    out["unshare_user_ns"] = _cmd(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--fork",
                                   "sh", "-c", "echo ok"])
    out["seccomp_in_status"] = _cmd(["grep", "-E", "^(Seccomp|NoNewPrivs|CapEff)", "/proc/self/status"])
    for f in ("/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone"):
        out[f] = _cmd(["cat", f])
    return out


# ---------------------------------------------------------------------------------------------------- verdicts


def _history_and_target(nb_path: Path, target: int) -> tuple[list[str], str]:
    nb = json.loads(nb_path.read_text())
    cells = nb["cells"]
    hist = sorted((c["execution_count"], i, "".join(c["source"])) for i, c in enumerate(cells, 1)
                  if c["cell_type"] == "code" and c.get("execution_count") is not None and i != target)
    return [h[2] for h in hist], "".join(cells[target - 1]["source"])


def real_run(case_dir: Path, variant: dict, python: str) -> dict:
    """The ground truth on this machine: a fresh kernel in the case folder, the history, then the target."""
    from crane.kernel.manager import start_kernel

    history, target = _history_and_target(case_dir / variant["notebook"], variant["target_cell"])
    t0 = time.monotonic()
    kernel = start_kernel(case_dir, python=python, env={"MPLBACKEND": "Agg"})
    try:
        conn = kernel.connection
        errors = []
        for src in history:
            r = conn.run_cell(src, timeout=300)
            if r.status != "ok":
                errors.append(f"{r.ename}: {(r.evalue or '')[:200]}")
        history_s = time.monotonic() - t0
        r = conn.run_cell(target, timeout=300)
        return {"crash": r.status == "error", "ename": r.ename, "evalue": (r.evalue or "")[:400] or None,
                "target_s": round(r.elapsed_s, 3), "history_s": round(history_s, 2), "history_errors": errors}
    finally:
        kernel.shutdown()


def verdicts(set_dir: Path, python: str, budget: float, save) -> dict:
    import crane.sandbox.scale as scale
    from crane.bench.cases import find_cases
    from crane.bench.runner import ModePredictor, run_cases
    from crane.commands.bench import build_report

    cases = find_cases([str(set_dir)])
    work = [(c, name, v) for c in cases for name, v in c.variants.items()]
    # the ground truth runs beside CRANE's (5 kernels at a time: 16 cores)
    pool = ThreadPoolExecutor(max_workers=5)
    truth: dict = {}
    details: dict = {}
    lock = threading.Lock()

    def partial() -> None:
        with lock:
            save({"partial": True, "details": details, "truth": truth})

    def real_one(c, name, v) -> None:
        try:
            truth[f"{c.id}/{name}"] = real_run(Path(c.directory), {"notebook": v.notebook,
                                                                   "target_cell": v.target_cell}, python)
        except Exception as exc:  # a variant whose real run failed to start: said, not guessed
            truth[f"{c.id}/{name}"] = {"error": f"{type(exc).__name__}: {exc}"}
        partial()

    futures = [pool.submit(real_one, c, name, v) for c, name, v in work]
    seen: dict = {}
    original = scale.speculate_scaled

    def capture(*a, **k):
        v = original(*a, **k)
        seen["v"] = v
        return v

    scale.speculate_scaled = capture
    base = ModePredictor("auto", None, budget)

    def predictor(replayed, target, result):
        seen.clear()
        base(replayed, target, result)
        v = seen.get("v")
        d = {"sandbox": None}
        if v is not None:  # the sandbox's record as `crane bench --json` nests it, and how it was reached
            d["sandbox"] = {**msgspec.to_builtins(v), "how": v.how()}
        d["result"] = msgspec.to_builtins(result)
        details[f"{result.case}/{result.variant}"] = d
        partial()

    t0 = time.monotonic()
    results = run_cases(cases, predictor, jobs=1, python=python)
    auto_s = time.monotonic() - t0
    report = build_report("auto", results)
    for fut in futures:
        fut.result()
    pool.shutdown()
    rows = []
    for r in results:
        key = f"{r.case}/{r.variant}"
        real = truth.get(key, {})
        rows.append({"variant": key, "expect_crash": r.expect_crash, "expect_ename": r.expect_ename,
                     "real_crash": real.get("crash"), "real_ename": real.get("ename"),
                     "crane_predicted_crash": r.predicted_crash, "crane_ename": r.predicted_ename,
                     "verdict": r.verdict, "decided_by": r.decided_by, "sandbox_mode": r.sandbox.mode if r.sandbox else None,
                     "kernel_unchanged": r.kernel_unchanged, "seconds": r.seconds,
                     "rules_predicted_crash": r.rules_predicted_crash, "error": r.error,
                     "correct_vs_real": (None if real.get("crash") is None
                                         else r.predicted_crash == real.get("crash"))})
    return {"auto_wall_s": round(auto_s, 1), "rows": rows, "truth": truth, "details": details,
            "report": msgspec.to_builtins(report)}


# ---------------------------------------------------------------------------------------------------- diagnose
# Plain processes with the transplant worker's environment (GPUs hidden), no confinement: is a wrong verdict the
# confinement's doing, or the library's under that environment?
WORKER_ENV = {"CUDA_VISIBLE_DEVICES": "-1", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
              "PYTHONFAULTHANDLER": "1"}
PROBES = {
    "jax_cpu_gpus_hidden": "import jax, jax.numpy as jnp\nprint(jax.devices(), (jnp.ones(3) + 1).tolist())",
    "jax_jit_gpus_hidden": ("import jax, jax.numpy as jnp\nf = jax.jit(lambda w, x: x @ w)\n"
                            "print(f(jnp.zeros((8, 1)), jnp.ones((4, 8))).shape)"),
    "torch_adam_step_gpus_hidden": ("import torch\nm = torch.nn.Linear(2, 2)\no = torch.optim.Adam(m.parameters())\n"
                                    "m(torch.ones(1, 2)).sum().backward()\no.step()\nprint('ok')"),
    "torch_adam_step_is_available_patched": (
        "import torch\ntorch.cuda.is_available = lambda: True\nm = torch.nn.Linear(2, 2)\n"
        "o = torch.optim.Adam(m.parameters())\nm(torch.ones(1, 2)).sum().backward()\no.step()\nprint('ok')"),
    "torch_sgd_step_is_available_patched": (
        "import torch\ntorch.cuda.is_available = lambda: True\nm = torch.nn.Linear(2, 2)\n"
        "o = torch.optim.SGD(m.parameters(), lr=0.1)\nm(torch.ones(1, 2)).sum().backward()\no.step()\nprint('ok')"),
}


def diagnose(python: str) -> dict:
    out = {}
    env = {**os.environ, **WORKER_ENV}
    for name, src in PROBES.items():
        try:
            p = subprocess.run([python, "-c", src], capture_output=True, text=True, timeout=60, env=env)
            out[name] = {"rc": p.returncode, "stdout": p.stdout[-600:], "stderr": p.stderr[-2500:]}
        except subprocess.TimeoutExpired:
            out[name] = {"rc": "timeout"}
    return out


# ------------------------------------------------------------------------------------------------------ timing

GPU_SETUP = """
import torch, torch.nn as nn
dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(dev)
x = torch.randn({rows}, 1024, device=dev)  # {mib} MiB
{extra}
if dev.type == 'cuda':
    torch.cuda.synchronize()
"""
GPU_CELL = "out = model(x[:256].to(dev))\nout.shape"
GPU_BAD = "out = model(x[:256, :512])\nout.shape"  # a shape error: must be a crash, on the GPU and in the copy


class Listener:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.settimeout(2)
            try:
                self.received.append(c.recv(4096) or b"(connected)")
            except OSError:
                self.received.append(b"(connected)")
            c.close()


def _brief(v) -> dict:
    t = v.transplant
    return {"verdict": v.verdict, "ename": v.ename, "evalue": (v.evalue or "")[:200] or None, "reason": v.reason,
            "mode": v.mode, "mode_reason": v.mode_reason, "how": v.how(), "landlock_abi": v.landlock_abi,
            "denied": v.denied, "elapsed_ms": v.elapsed_ms, "overhead_ms": v.overhead_ms,
            "transplant": msgspec.to_builtins(t) if t is not None else None}


def _tree(d: Path) -> list:
    return sorted((str(p.relative_to(d)), p.stat().st_size) for p in d.rglob("*") if p.is_file())


def timing(python: str, runs: int, budget: float, save, mib: int = 256, extra: str = "") -> dict:
    """`save(out)` after every step: a step cut short by the time limit leaves the ones before it."""
    from crane.kernel.manager import start_kernel
    from crane.sandbox import options, speculate
    from crane.sandbox.transplant import POOL

    out: dict = {"tensor_mib": mib}
    work = Path(tempfile.mkdtemp(prefix="crane-cuda-"))
    (work / "data.csv").write_text("a,b\n1,2\n")
    kernel = start_kernel(work, python=python)
    try:
        conn = kernel.connection
        r = conn.run_cell(GPU_SETUP.format(rows=mib * 256, mib=mib, extra=extra), timeout=300)
        if r.status != "ok":
            return {"error": f"setup failed: {r.ename}: {r.evalue}"}
        out["kernel_device"] = conn.evaluate("str(x.device)")
        exe = conn.evaluate("__import__('sys').executable")
        real = conn.run_cell(GPU_CELL, timeout=120)
        out["real_cell_s"] = round(real.elapsed_s, 3)
        bad_real = conn.run_cell(GPU_BAD, timeout=120)
        out["bad_real"] = {"status": bad_real.status, "ename": bad_real.ename, "evalue": (bad_real.evalue or "")[:200]}
        save(out)

        def one() -> tuple[dict, object]:
            t0 = time.monotonic()
            v = speculate(conn, GPU_CELL, budget)
            wall = (time.monotonic() - t0) * 1000.0
            t = v.transplant
            row = {"verdict": v.verdict, "wall_ms": round(wall, 1), "cell_ms": v.elapsed_ms,
                   "overhead_ms": v.overhead_ms, "export_ms": t.export_ms if t else None, "setup_ms": v.setup_ms,
                   "load_ms": v.setup_steps.get("load"), "bytes": t.bytes if t else None,
                   "warm": t.warm if t else None}
            return row, v

        options.configure(options.SandboxOptions(warm_workers=False))
        cold = []
        for _ in range(runs):
            row, v = one()
            cold.append(row)
            out["cold"] = cold
            save(out)
        out["cold_verdict"] = _brief(v)
        options.configure(options.SandboxOptions(warm_workers=True))
        one()  # starts the first warm worker
        warm = []
        for _ in range(runs):
            ready = POOL.wait_ready(exe, 120.0)
            row, v = one()
            row["ready"] = ready
            warm.append(row)
            out["warm"] = warm
            save(out)
        out["warm_verdict"] = _brief(v)
        out["cold"], out["warm"] = cold, warm
        for key in ("cold", "warm"):
            rows = [r for r in out[key] if r["verdict"] == "no-crash"]
            if rows:
                out[key + "_median"] = {k: round(statistics.median(r[k] for r in rows if r[k] is not None), 1)
                                        for k in ("wall_ms", "cell_ms", "overhead_ms", "export_ms", "setup_ms",
                                                  "load_ms", "bytes")
                                        if any(r[k] is not None for r in rows)}
        save(out)
        out["bad_copy"] = _brief(speculate(conn, GPU_BAD, budget))
        save(out)
        # side effects from the transplant worker: a write in the kernel's folder, a loopback connection
        listener = Listener()
        before = _tree(work)
        src = (f"open('data.csv', 'w').write('changed')\nopen('new.txt', 'w').write('x')\nimport socket\n"
               f"s = socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)\n"
               f"s.sendall(b'hello from transplant')\nout = model(x[:2])\nout.shape")
        v = speculate(conn, src, budget)
        time.sleep(0.5)  # the listener thread records what arrived (nothing, when the confinement holds)
        out["side_effects"] = {"verdict": _brief(v), "tree_unchanged": _tree(work) == before,
                               "listener_received": [b.decode(errors="replace") for b in listener.received]}
        out["kernel_still_answers"] = conn.evaluate("1 + 1") == 2
        save(out)
    finally:
        POOL.shutdown()
        kernel.shutdown()
    # a CPU-only kernel on the same machine: forked, layered or blocking
    kernel = start_kernel(work, python=python)
    try:
        conn = kernel.connection
        conn.run_cell("import numpy as np\na = np.arange(12).reshape(3, 4)", timeout=120)
        out["fork_clean"] = _brief(speculate(conn, "a.sum()", budget))
        save(out)
        out["fork_crash"] = _brief(speculate(conn, "a @ a", budget))
        before = _tree(work)
        out["fork_write"] = _brief(speculate(conn, "open('data.csv', 'w').write('x')\nopen('data.csv').read()", budget))
        out["fork_write"]["tree_unchanged"] = _tree(work) == before
    finally:
        kernel.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=("facts", "verdicts", "timing", "diagnose"))
    ap.add_argument("set", nargs="?", default="benchmarks/cuda-lite")
    ap.add_argument("--python", default="python3")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--out", help="write the JSON here (timing: after every step) instead of stdout")
    ap.add_argument("--mib", type=int, default=256, help="timing: the GPU tensor's size")
    ap.add_argument("--extra-setup", default=os.environ.get("CUDA_CHECK_EXTRA_SETUP", ""), help="timing: more setup (a CPU test: 'import jax' to transplant)")
    a = ap.parse_args()
    t0 = time.monotonic()

    def save(doc: dict) -> None:
        doc["step_s"] = round(time.monotonic() - t0, 1)
        text = json.dumps(doc, indent=1, default=str)
        if a.out:
            Path(a.out + ".part").write_text(text)
            os.replace(a.out + ".part", a.out)
        else:
            print(text)

    if a.step == "facts":
        doc = facts(a.python)
    elif a.step == "diagnose":
        doc = diagnose(a.python)
    elif a.step == "verdicts":
        doc = verdicts(Path(a.set), a.python, a.budget, save if a.out else (lambda d: None))
    else:
        doc = timing(a.python, a.runs, a.budget, save if a.out else (lambda d: None), a.mib, a.extra_setup)
    save(doc)


if __name__ == "__main__":
    main()

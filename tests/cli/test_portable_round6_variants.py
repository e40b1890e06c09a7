"""Round 6: variants of round 5's families (../shared/notes/sandbox-attacks-5.md) that escaped the portable sandbox's
Python layers (`crane check NB --sandbox guard`: the call guard and the audit hook alone) before this round's fixes,
through the CLI on IPython 8 and 9 kernels, under `--sandbox guard` and `--sandbox portable` (Landlock and seccomp
under the same layers where Linux has them):
- P2 the kernel driven: the kernel's connection file read (`jupyter_client.BlockingKernelClient` found it through
  /proc and made the kernel run code: `x = 666`); psutil's own C process controls (`_psutil_linux.proc_*_set`,
  directly and through `map`) pinned and re-niced another process;
- P1 a write-open relative to a folder descriptor (`os.open(name, O_CREAT, dir_fd=fd)`, `open(..., opener=...)`):
  the audit event names the path alone, so a descriptor of a folder outside wrote there;
- P3 native writers given a `file://` URL (`pq.write_table`, polars `write_parquet`/`sink_csv`) or missing from the
  table (polars `serialize`, `pyarrow.fs.copy_files`): written outside by pyarrow's C++ or polars' Rust;
- P6 honest code that puts a view link in a tar archive got a certain KeyError (the kernel runs it clean).
Each attack must be `blocked` with nothing outside changed (files hashed, a marker the kernel would write, a
sentinel process's nice value and CPU affinity); the honest cells keep the kernel's verdict (no certain crash, a
write through a folder descriptor inside the working folder and to a `file://` URL of it go to the run's copies).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .conftest import make_notebook
from .test_check_sandbox import check

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="psutil's Linux module, /proc")

SETUP = ("import os, json, io\nimport pandas as pd\nkpid = os.getpid()\ndf = pd.DataFrame({'a': [1, 2, 3]})", 1)
CONNECTION = ("argv = open(f'/proc/{kpid}/cmdline', 'rb').read().split(b'\\0')\n"
              "cf = [a for a in argv if a.endswith(b'.json')][-1].decode()\n")
ATTACKS = {
    "jupyter_client drives the kernel": CONNECTION + (
        "from jupyter_client import BlockingKernelClient\n"
        "c = BlockingKernelClient()\nc.load_connection_file(cf)\nc.start_channels()\n"
        "c.execute(\"open('@OUT@/kernel-ran', 'w').write('x')\")\nc.get_shell_msg(timeout=60)"),
    "the connection file read": CONNECTION + "key = json.load(open(cf))['key']",
    "psutil's C affinity": "import psutil\npsutil._psutil_linux.proc_cpu_affinity_set(@SENT@, [0])",
    "psutil's C nice through map": "import psutil\nlist(map(psutil._psutil_linux.proc_priority_set, [@SENT@], [19]))",
    "os.open relative to a folder outside": ("fd = os.open('@OUT@', os.O_RDONLY)\n"
                                             "os.write(os.open('dirfd', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), b'x')"),
    "open's opener relative to a folder outside": ("fd = os.open('@OUT@', os.O_RDONLY)\n"
                                                   "open('opener', 'w', opener=lambda p, f: os.open(p, f, dir_fd=fd))"
                                                   ".write('x')"),
}
ATTACKS_TODAY = {  # through the today environment's pyarrow and polars (IPython 9)
    "pq.write_table to a file:// URL": ("import pyarrow as pa, pyarrow.parquet as pq\n"
                                        "pq.write_table(pa.table({'a': [1]}), 'file://@OUT@/url.parquet')"),
    "polars write_parquet to a file:// URL": "import polars as pl\npl.DataFrame({'a': [1]}).write_parquet("
                                             "'file://@OUT@/pl.parquet')",
    "polars sink_csv to a file:// URL": "import polars as pl\npl.DataFrame({'a': [1]}).lazy().sink_csv("
                                        "'file://@OUT@/sink.csv')",
    "polars serialize": "import polars as pl\npl.DataFrame({'a': [1]}).serialize('@OUT@/ser.bin')",
    "pyarrow.fs.copy_files": "import pyarrow.fs as fs\nfs.copy_files('@OUT@/secret.txt', '@OUT@/copied.txt')",
}
HONEST = {
    "a tar of a file of the folder": ("import tarfile\nb = io.BytesIO()\n"
                                      "with tarfile.open(fileobj=b, mode='w') as t:\n    t.add('important.csv')\n"
                                      "b.seek(0)\nwith tarfile.open(fileobj=b) as t:\n"
                                      "    print(t.extractfile('important.csv').read().decode().strip())"),
    "os.open relative to the working folder": ("fd = os.open('.', os.O_RDONLY)\n"
                                               "os.close(os.open('important.csv', os.O_WRONLY | os.O_TRUNC, dir_fd=fd))\n"
                                               "print(repr(open('important.csv').read()))"),
}
HONEST_TODAY = {
    "to_parquet to a file:// URL of the folder": ("df.to_parquet('file://' + os.path.abspath('out.parquet'))\n"
                                                  "print(len(pd.read_parquet('out.parquet')))"),
}
HONEST_OUT = {"a tar of a file of the folder": "keep me", "os.open relative to the working folder": "''",
              "to_parquet to a file:// URL of the folder": "3"}


def _tree(d) -> dict:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def _sched(pid: int) -> tuple:
    return os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid))


@pytest.fixture
def sentinel():
    """A process of this user that is not the sandbox's: what the kernel is to a cell (nice and pinning)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield proc.pid
    proc.communicate(timeout=30)


@pytest.mark.timeout(600)  # (13 cells, each its own portable run; 300 s at load 15-20 on the 2 shared cores)
@pytest.mark.parametrize("sandbox", ["guard", "portable"])
@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_round6_variants_through_the_cli(kernel_env, sandbox, nb_dir, tmp_path_factory, sentinel):
    python = kernel_python(kernel_env)
    work, out = nb_dir / "work", tmp_path_factory.mktemp("outside")
    work.mkdir()
    (work / "important.csv").write_text("keep me\n")
    (out / "secret.txt").write_text("secret\n")
    attacks = dict(ATTACKS, **(ATTACKS_TODAY if kernel_env == "ipython9" else {}))
    honest = dict(HONEST, **(HONEST_TODAY if kernel_env == "ipython9" else {}))
    cells = list(attacks.items()) + list(honest.items())
    sources = [(src.replace("@OUT@", str(out)).replace("@SENT@", str(sentinel)), None) for _, src in cells]
    before = (_tree(work), _tree(out), _sched(sentinel))
    nb = make_notebook(work / "r6.ipynb", [SETUP, *sources])
    results = check(nb, "--budget", "60", "--sandbox", sandbox, "--python", python)
    (work / "r6.ipynb").unlink()
    assert len(results) == len(cells), results
    for (name, _), cell in zip(cells, results, strict=True):
        v = cell.sandbox
        assert v is not None and v.mode == "portable", (sandbox, name, cell)
        if name in attacks:
            assert v.verdict == "blocked", (sandbox, name, v)
            assert sandbox == "portable" or v.refusal is not None, (sandbox, name, v)  # (else the OS layer's)
        else:
            assert (v.verdict, v.stdout.strip()) == ("no-crash", HONEST_OUT[name]) or (
                v.verdict == "crash" and not v.certain), (sandbox, name, v)
        assert (_tree(work), _tree(out), _sched(sentinel)) == before, (sandbox, name, v)


PIDS = ("import os, psutil\nproc = psutil.Process(os.getpid())\nkpid = os.getpid()", 1)
PID_CELLS = ("print(proc.memory_info().rss > 0)", "os.kill(kpid, 0)\nprint('alive')",
             "print(open(f'/proc/{kpid}/status').read()[:5])")


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_pid_the_kernel_recorded_is_no_certain_crash(kernel_env, nb_dir):
    """P6 on the default path (the OS sandbox's fork): the kernel's own pid, recorded in a cell before, is not in the
    fork's pid namespace; the kernel runs these cells clean, so a NoSuchProcess/ProcessLookupError there is never a
    certain crash (nor the sandbox's decision)."""
    nb = make_notebook(nb_dir / "pids.ipynb", [PIDS, *((src, None) for src in PID_CELLS)])
    results = check(nb, "--budget", "30", "--python", kernel_python(kernel_env))
    assert len(results) == len(PID_CELLS), results
    for cell in results:
        v = cell.sandbox
        assert v is not None, cell
        assert v.verdict == "no-crash" or not (v.verdict == "crash" and v.certain), v
        assert cell.prediction != "crash" or cell.decided_by != "sandbox", cell

"""Issue 30: the transplant export never runs the user's code, never harms the kernel, never lies; session replies
cannot be forged by an earlier run.

Kernels of both environments (tests/kernel_envs.py) on the transplant path: IPython 9 with JAX loaded (today's
environment), IPython 8 with a stand-in `jax` module (the daemon's environment has no JAX; the kernel then refuses
to fork exactly as with the real one). Each attempt family of docs/../sandbox-attacks-4.md is one case: the
notebook's hook appends to `HITS` in the kernel, and `Untouched` (with its effect sentinels: a profile hook, open
and json wrappers, an input transformer, and a sentinel object whose every hook records) must see nothing.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from crane.kernel.client import KernelConnection
from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched, watch_target
from crane.sandbox import speculate
from crane.sandbox import transplant as transplant_mod
from crane.sandbox.channel import PrivateDir
from crane.sandbox.session import open_session
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from ..library_versions import skip_without_torch_in
from ..sandbox_options import use_options

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = r"""
import sys, types, json, builtins, pickle
if {real_jax}:
    import jax, jax.numpy as jnp
else:
    sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: transplant path
import numpy as np, pandas as pd
HITS = []
def hit(what):
    HITS.append(what)

class Box:
    pass
a1 = Box(); a1.v = 1
a1.__reduce_ex__ = lambda p: (hit('A1 instance __reduce_ex__'), (int, (1,)))[1]
a2 = Box(); a2.v = 2
a2.__getstate__ = lambda: (hit('A2 instance __getstate__'), {{}})[1]
class Liar:
    __module__ = 'numpy'
    def __reduce__(self):
        hit('A3 lying module'); return (int, (1,))
a3 = Liar()
class Missing:
    __module__ = 'no_such_module_anywhere'
    def __reduce__(self):
        hit('A4 missing module'); return (int, (1,))
a4 = Missing()
class ClassProp:
    @property
    def __class__(self):
        hit('A5 __class__'); return ClassProp
a5 = ClassProp()
class Items(dict):
    def items(self):
        hit('A6 items'); return dict.items(self)
a6 = Items(k=1)
class Iter(list):
    def __iter__(self):
        hit('A7 __iter__'); return list.__iter__(self)
a7 = Iter([1, 2])
class Slotted:
    __slots__ = ('s',)
class SlotProp(Slotted):
    @property
    def s(self):
        hit('A8 slot property'); return 1
a8 = SlotProp()
class Meta(type):
    def __hash__(cls):
        hit('A9 metaclass __hash__'); return 1
class WithMeta(metaclass=Meta):
    pass
a9 = WithMeta()
class Meta2(type):
    def __getattribute__(cls, name):
        hit('A9b metaclass __getattribute__ ' + name); return type.__getattribute__(cls, name)
class WithMeta2(metaclass=Meta2):
    pass
a9b = WithMeta2()
class Frame(pd.DataFrame):
    @property
    def _metadata(self):
        hit('A10 _metadata'); return []
a10 = Frame({{'a': [1, 2]}})
a19 = np.empty(2, dtype=object); a19[0] = a1
@pd.api.extensions.register_dataframe_accessor('memory_usage')
class Shadow:
    def __init__(self, df):
        hit('A11 accessor memory_usage')
    def __call__(self, *a, **k):
        return pd.Series([0])
a11 = pd.DataFrame({{'a': [1, 2]}})
import random, logging
class Rng(random.Random):  # Random's own __reduce__ calls self.getstate(): pickling would run this
    def getstate(self):
        hit('A20 getstate reached from a library reducer'); return random.Random.getstate(self)
a20 = Rng(1)
_real_get_logger = logging.getLogger
def _patched_get_logger(name=None):  # Logger.__reduce__ calls the module's getLogger
    if name == 'crane-a22':
        hit('A22 patched library global')
    return _real_get_logger(name)
logging.getLogger = _patched_get_logger
a22 = _real_get_logger('crane-a22')
import copyreg
class Registered:
    pass
def _reduce_registered(obj):
    hit('A23 copyreg reducer'); return (Registered, ())
copyreg.pickle(Registered, _reduce_registered)
a23 = Registered()
"""

ATTEMPTS = [("a1", "print(a1.v)"), ("a2", "print(a2.v)"), ("a3", "print(a3)"), ("a4", "print(a4)"),
            ("a5", "print(a5)"), ("a6", "print(len(a6))"), ("a7", "print(len(a7))"), ("a8", "print(a8)"),
            ("a9", "print(a9)"), ("a9b", "print(a9b)"), ("a10", "print(len(a10))"), ("a19", "print(a19[0].v)"),
            ("a11", "print(len(a11))"), ("a20", "print(a20.random() < 1)"), ("a22", "print(a22.name)"),
            ("a23", "print(a23)"),
            ("sentinel", "print(sentinel)")]


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def env(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"t30-{request.param}")
    kernel = start_kernel(work, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP.format(real_jax=request.param == "ipython9"), timeout=180)
    assert run.status == "ok", run
    yield {"name": request.param, "conn": conn, "work": work, "kernel": kernel}
    kernel.shutdown()


def _hits(conn) -> list:
    return conn.evaluate("list(HITS)")


@pytest.mark.parametrize(("name", "cell"), ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
def test_pickling_and_attribute_hooks_never_run_in_the_kernel(env, name, cell):
    conn = env["conn"]
    conn.evaluate("HITS.clear()")
    with Untouched(conn, sentinel="sentinel") as watch:
        v = transplant(conn, cell, 30.0)
    assert _hits(conn) == [] and watch.hits == [], (_hits(conn), watch.hits, v)
    assert watch.unchanged, (watch.changes(), watch.outputs)
    if name == "a11":  # an accessor shadowing a library method the export reads: never called, nothing refused
        assert v.verdict == "no-crash", v
        return
    assert v.verdict == "unavailable" and "notebook" in (v.reason or ""), v  # refused, named
    if name != "sentinel":
        assert f"`{name}`" in (v.reason or ""), v


def test_a_library_pickling_function_the_notebook_replaced_is_not_called(env):
    conn = env["conn"]
    run = conn.run_cell("df12 = pd.DataFrame({'a': [1.0, 2.0]})\n_orig_gs = pd.DataFrame.__getstate__\n"
                        "pd.DataFrame.__getstate__ = lambda self: (hit('A12 patched __getstate__'), _orig_gs(self))[1]")
    assert run.status == "ok", run
    try:
        conn.evaluate("HITS.clear()")
        with Untouched(conn) as watch:
            v = transplant(conn, "print(df12.a.sum())", 30.0)
        assert _hits(conn) == [] and watch.unchanged, (_hits(conn), watch.hits, v)
        assert v.verdict == "unavailable" and "`df12`" in (v.reason or ""), v
    finally:
        conn.run_cell("pd.DataFrame.__getstate__ = _orig_gs")


GLOBAL_HOOKS = r"""
import sys, json, builtins, threading
def _prof(frame, event, arg):
    if frame.f_code.co_filename.startswith('<crane-kernel') and frame.f_back is not None \
            and frame.f_back.f_code.co_filename.startswith('<crane-kernel'):
        hit('A15 profile ' + event + ' ' + frame.f_code.co_name)
sys.setprofile(_prof)
threading.setprofile(_prof)
_real_open, _real_loads = builtins.open, json.loads
def _open(*a, **k):
    if sys._getframe(1).f_code.co_filename.startswith('<crane-kernel'):
        hit('A17 open ' + str(a[0]))
    return _real_open(*a, **k)
def _loads(*a, **k):
    if sys._getframe(1).f_code.co_filename.startswith('<crane-kernel'):
        hit('A17b json.loads')
    return _real_loads(*a, **k)
builtins.open, json.loads = _open, _loads
def _transformer(lines):
    if ''.join(lines).strip():
        hit('A21 input transformer')
    return lines
get_ipython().input_transformers_post.append(_transformer)
"""
UNHOOK = ("sys.setprofile(None); threading.setprofile(None); builtins.open, json.loads = _real_open, _real_loads; "
          "get_ipython().input_transformers_post.remove(_transformer)")


def test_global_hooks_never_see_crane_code_on_the_transplant_path(env):
    conn = env["conn"]
    run = conn.run_cell("small = [1, 2, 3]")
    assert run.status == "ok"
    conn.evaluate("HITS.clear()")
    assert conn.run_cell(GLOBAL_HOOKS).status == "ok"
    try:
        v = transplant(conn, "!echo {small}\nprint(sum(small))", 30.0)
        hits = _hits(conn)
    finally:
        conn.run_cell(UNHOOK)
    assert hits == [], hits
    assert v.verdict == "no-crash", v


@pytest.fixture(scope="module")
def fork_kernel(tmp_path_factory):
    """An IPython 8 kernel that forks (no JAX): the fork path's entry."""
    kernel = start_kernel(tmp_path_factory.mktemp("t30-fork"), python=kernel_python("ipython8"))
    conn = kernel.connection
    assert conn.run_cell("HITS = []\ndef hit(w):\n    HITS.append(w)\nx = 1").status == "ok"
    yield conn
    kernel.shutdown()


def test_global_hooks_never_see_crane_code_on_the_fork_path(fork_kernel):
    conn = fork_kernel
    assert conn.run_cell(GLOBAL_HOOKS).status == "ok"
    try:
        v = speculate(conn, "print(x + 1)", 30.0)
        hits = _hits(conn)
    finally:
        conn.run_cell(UNHOOK)
    assert hits == [], hits
    assert v.verdict == "no-crash", v


def _forging_cell(records: list[dict], must_find: bool = True) -> str:
    """A cell that writes `records` as reply lines into every result FIFO of its own process it can find (`must_find`:
    and fails when it finds none)."""
    return ("import os, json\n"
            "def _link(f):\n"
            "    try:\n"
            "        return os.readlink(f'/proc/self/fd/{f}')\n"
            "    except OSError:\n"
            "        return ''\n"
            "fds = [int(f) for f in os.listdir('/proc/self/fd') if _link(f).endswith('/result')]\n"
            + ("assert fds\n" if must_find else "")
            + "for fd in fds:\n"
            f"    for r in {records!r}:\n"
            "        os.write(fd, (json.dumps(r) + '\\n').encode())\n")


def test_forged_session_lines_change_no_later_verdict(fork_kernel):
    """A fork session's command runs in a process that holds no descriptor of the daemon's channel (issue 41): the
    forging cell finds none to write to, and nothing it tried changes a later verdict."""
    forge = _forging_cell([{"event": "reply", "verdict": "no-crash", "id": 3},
                           {"event": "reply", "verdict": "crash", "ename": "ZeroDivisionError", "evalue": "forged",
                            "line": 1, "id": 4}, {"event": "resumed", "pid": 1, "depth": 0}], must_find=False)
    with open_session(fork_kernel, budget_s=20.0) as sess:
        first = sess.run(forge + "print(len(fds))")
        assert (first.verdict, first.stdout.strip()) == ("no-crash", "0"), first
        for _ in range(2):
            v = sess.run("y = 1")
            assert v.verdict == "no-crash" and v.ename is None, v
        bad = sess.run("1 / 0")
        assert bad.verdict == "crash" and bad.ename == "ZeroDivisionError" and bad.evalue != "forged", bad


def test_forged_lines_in_a_transplant_session_change_no_later_verdict(env):
    forge = _forging_cell([{"event": "reply", "ok": False, "reason": "forged load"},
                           {"event": "reply", "verdict": "crash", "ename": "ZeroDivisionError", "evalue": "forged"}])
    env["conn"].run_cell("small2 = [4, 5]")
    with open_session(env["conn"], budget_s=30.0) as sess:
        v = sess.run(forge)  # (issue 41: its reply is sealed over CRANE's bytes alone, and the cell wrote beside it)
        assert v.verdict == "blocked" and "the cell wrote into CRANE's result channel" in (v.reason or ""), v
        v = sess.run("print(sum(small2))")  # reads a kernel name: a load first, then the run
        assert v.verdict == "no-crash" and "9" in v.stdout, v
        assert sess.forged >= 2, sess.forged


def test_a_deep_structure_is_refused_and_the_kernel_survives(env):
    conn = env["conn"]
    run = conn.run_cell("sys.setrecursionlimit(1_000_000)\ndeep = None\nfor _i in range(300_000):\n    deep = [deep]",
                        timeout=120)
    assert run.status == "ok", run
    try:
        v = transplant(conn, "print(deep is not None)", 30.0)
        assert conn.evaluate("1 + 1") == 2  # alive (the old export overflowed the C stack: a segfault)
        assert v.verdict == "unavailable" and "`deep`" in (v.reason or "") , v
    finally:
        conn.run_cell("del deep\nsys.setrecursionlimit(3000)", timeout=120)


def test_a_big_export_is_cut_at_its_kernel_time_cap_and_the_kernel_goes_on(env, monkeypatch):
    """Millions of small objects pickle in-band for seconds: the export stops at `export_seconds` of kernel time
    (here 0.2 s, watched or not), the run is unavailable saying why (the rules decide), and the kernel answers at once after.
    (How long the user's cell then waits is measured by benchmarks/export_bench.py, not timed here.)"""
    conn = env["conn"]
    assert conn.run_cell("many = [(i, str(i)) for i in range(2_000_000)]", timeout=120).status == "ok"
    try:
        use_options(monkeypatch, export_seconds=0.2, watched_export_seconds=0.2)
        v = transplant(conn, "len(many)", 60.0)
        assert v.verdict == "unavailable" and "longer than the kernel may be kept busy" in (v.reason or ""), v
        assert conn.evaluate("len(many)") == 2_000_000
    finally:
        conn.run_cell("del many")


def _users_cell_during_export(env, monkeypatch, cell: str, ready, miniature: dict | None = None, **options) -> tuple:
    """Check `cell` by transplant while the user's client (attached before) sends `z_user = 1` as soon as
    `ready(private dir)` says the export reached the point under test. Asserts that the user's cell got its normal
    reply and execution count and that nothing else of the kernel changed (no effect sentinel fired, no other
    output); returns (the verdict, the names in the private directory when it was removed, its `phase`)."""
    conn = env["conn"]
    dirs: list[PrivateDir] = []
    left: dict = {}

    class Recorded(PrivateDir):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            dirs.append(self)

        def cleanup(self) -> None:
            left["names"] = sorted(os.listdir(self.path))
            if "phase" in left["names"]:
                with open(os.path.join(self.path, "phase")) as f:
                    left["phase"] = f.read()
            super().cleanup()

    monkeypatch.setattr(transplant_mod, "PrivateDir", Recorded)
    use_options(monkeypatch, **options)
    target = watch_target(conn)
    assert target is not None
    user = KernelConnection.attach(target)  # the user's client, ready before the export starts
    box: dict = {}
    try:
        count = conn.evaluate("get_ipython().execution_count")  # the number the next cell gets
        with Untouched(conn) as watch:
            t = threading.Thread(target=lambda: box.setdefault("v", transplant(
                conn, cell, 60.0, request_timeout=120.0, miniature=miniature)))
            t.start()
            while not (dirs and ready(dirs[0].path)):
                assert t.is_alive() and box == {}, (box, left)  # the export ended before the point under test
                time.sleep(0.005)
            run = user.run_cell("z_user = 1", timeout=120)
            t.join(300)
        assert run.status == "ok" and run.execution_count == count, run
        assert [h for h in watch.hits if "z_user" not in h] == [], watch.hits  # the user's cell's own transform
        assert set(watch.changes()) <= {"ns", "count", "In"}, watch.changes()
        before, after = (dict(x) for x in watch.changes()["ns"]) if "ns" in watch.changes() else ({}, {})
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        assert changed <= {"z_user", "_i", "_ii", "_iii", f"_i{count}"}, changed
        assert [m["msg_type"] for m in watch.outputs] == ["execute_input"], watch.outputs
    finally:
        user.client.stop_channels()
        conn.run_cell("z_user = None; del z_user", timeout=120)
    return box["v"], left.get("names"), left.get("phase")


def test_a_big_export_stops_as_soon_as_the_users_cell_is_queued(env, monkeypatch):
    """With a time cap that cannot be what stops it (60 s), a big in-band export is under way (its state file has
    its first frame) when the user's cell arrives from the user's own client: the export stops because a request
    is waiting (the run is unavailable saying so, and transient: the language server tries again; the rules
    decide meanwhile), the user's cell gets its normal reply and execution count, and nothing else of the kernel
    changed. On the old code the export ran on (its kernel-time cap only) and the run was not refused for the
    user's cell."""
    conn = env["conn"]
    assert conn.run_cell("many = [(i, str(i)) for i in range(2_000_000)]", timeout=120).status == "ok"

    def pickling(d: str) -> bool:  # its first frame is written
        return os.path.exists(state := os.path.join(d, "state.pkl")) and os.path.getsize(state) > 0

    try:
        v, _, _ = _users_cell_during_export(env, monkeypatch, "len(many)", pickling, export_seconds=60,
                                           watched_export_seconds=60)
        assert v.verdict == "unavailable" and "a request is waiting for the kernel" in (v.reason or ""), v
        assert v.transient, v
        assert conn.evaluate("len(many)") == 2_000_000
    finally:
        conn.run_cell("del many", timeout=120)


MINI = {"fraction": 0.05, "floor_rows": 64, "min_rows": 2000, "relative": 0.05, "seed": 0}


@pytest.fixture
def plain_env(env, tmp_path):
    """A kernel of the same environment without the attack set-up: a notebook accessor on DataFrame (A11) means the
    export never shrinks in the kernel (issue 42: shrinking runs pandas' code only while no class of pandas holds
    anything of the notebook's), so shrinking is watched on a kernel without one."""
    kernel = start_kernel(tmp_path, python=kernel_python(env["name"]))
    conn = kernel.connection
    setup = "import sys, types\nsys.modules.setdefault('jax', types.ModuleType('jax'))\nimport numpy as np, pandas as pd"
    assert conn.run_cell(setup, timeout=180).status == "ok"
    yield {"name": env["name"], "conn": conn}
    kernel.shutdown()


def test_shrinking_before_the_copy_stops_as_soon_as_the_users_cell_is_queued(plain_env, monkeypatch):
    """A frame of 6M rows is shrunk to row subsets in the kernel before it is copied (a miniature run): seconds of
    kernel time. The user's cell arrives while shrinking (the export's `phase` file says
    "shrinking"; the time cap, 60 s, cannot be what stops it): the export stops there, before any copy (no state
    file was ever written), the run is unavailable saying a request is waiting (transient), the user's cell gets
    its normal reply, nothing else of the kernel changed, and the frame is the user's, whole. On the old code the
    shrinking was neither watched nor capped: it ran to its end, and the copy began."""
    env = plain_env
    conn = env["conn"]
    setup = ("big = pd.DataFrame({'f': np.arange(6_000_000, dtype=float), 'i': np.arange(6_000_000) % 7,\n"
             "    'c': np.array(['x', 'y', 'z'], dtype=object)[np.arange(6_000_000) % 3],\n"
             "    'd': np.array(['p', 'q'], dtype=object)[np.arange(6_000_000) % 2]})")
    assert conn.run_cell(setup, timeout=120).status == "ok"

    def shrinking(d: str) -> bool:
        try:
            with open(os.path.join(d, "phase")) as f:
                return f.read() == "shrinking"
        except OSError:
            return False

    try:
        v, names, phase = _users_cell_during_export(env, monkeypatch, "big.groupby('c')['f'].mean()", shrinking,
                                                    miniature=MINI, export_seconds=60, watched_export_seconds=60)
        assert v.verdict == "unavailable" and "a request is waiting for the kernel" in (v.reason or ""), v
        assert v.transient, v
        assert phase == "shrinking" and not any(n.startswith(("state", "buf")) for n in names or []), (names, phase)
        assert tuple(conn.evaluate("(len(big), big['c'].iloc[-1])")) == (6_000_000, "z")
    finally:
        conn.run_cell("del big", timeout=120)


def test_the_users_cell_is_not_queued_behind_a_huge_cells_check(env, monkeypatch):
    """A 100 KB cell with 150 `!` escapes: its names are found in the daemon, so the kernel's share is small;
    the user's cell, sent from the user's own connection while the check runs, is answered (the old export
    re-tokenised the cell once per escape in the kernel: minutes, and the user's cell waited), and the export
    itself ends well (neither past its kernel-time cap nor without the kernel's answer: both say "busy").
    The kernel's share is the export: once it has answered, the worker's run of the cell (150 shells; its own
    transform of the cell) proves nothing here, so the run is cancelled then instead of waiting out its budget."""
    conn = env["conn"]
    conn.run_cell("a = 1")
    body = "\n".join(f"v{i} = a + {i}" for i in range(8000))
    escapes = "\n".join(f"!echo {{a}} {i}" for i in range(150))
    huge = body + "\n" + escapes
    started, cancel, box = threading.Event(), threading.Event(), {}
    exported: dict[str, object] = {}
    real_export = transplant_mod._export

    def export(*args, **kwargs):  # the real export; the run after it is cancelled once it has answered
        try:
            exported["reply"] = reply = real_export(*args, **kwargs)
            return reply
        except BaseException as exc:
            exported["error"] = exc
            raise
        finally:
            cancel.set()

    monkeypatch.setattr(transplant_mod, "_export", export)

    def check() -> None:
        started.set()
        box["v"] = transplant(conn, huge, 30.0, request_timeout=30.0, cancel=cancel)

    target = watch_target(conn)
    assert target is not None
    user = KernelConnection.attach(target)
    try:
        t = threading.Thread(target=check, daemon=True)
        t.start()
        started.wait()
        run = user.run_cell("z = 1", timeout=60)  # generous: the old export kept the kernel busy for minutes
        assert run.status == "ok", run
    finally:
        user.client.stop_channels()
    t.join(300)
    assert "busy" not in (box["v"].reason or ""), box["v"]
    reply = exported.get("reply")
    assert isinstance(reply, transplant_mod.ExportReply) and reply.ok, (exported, box["v"])


HONEST = r"""
import sys
sys.setrecursionlimit(20000)
hdf = pd.DataFrame({'a': np.arange(5.0)})
pd.set_option('display.max_rows', 7)
@pd.api.extensions.register_dataframe_accessor('geo')
class Geo:
    def __init__(self, df):
        self._df = df
    @property
    def center(self):
        return float(self._df['a'].mean())
"""


def test_honest_cells_get_the_real_verdict(env):
    conn = env["conn"]
    assert conn.run_cell(HONEST, timeout=60).status == "ok"
    assert conn.run_cell("hdf.describe()").status == "ok"  # `_` and Out[n] are its result
    n = conn.evaluate("max(Out)")
    cells = ["desc = _\nprint(desc.shape)", f"print(Out[{n}].shape)", "print(len(In[1]) > 0)",
             "def d(k):\n    return 0 if k == 0 else 1 + d(k - 1)\nprint(d(5000))", "print(hdf.geo.center)",
             "assert pd.get_option('display.max_rows') == 7"]
    if env["name"] == "ipython9":
        assert conn.run_cell("jax.config.update('jax_enable_x64', True)\njf = jax.jit(lambda v: v * 2)\n"
                             "tree = jax.tree_util.tree_structure({'a': 1})").status == "ok"
        cells += ["x = jnp.array(2**40)\nprint(x.dtype)",  # a jitted function and a pytree: compiled types
                  "print(float(jf(jnp.ones(2)).sum()), tree.num_leaves)"]
    try:  # each cell run for real first (but those reading `_` or Out: their value is the describe() above)
        for cell in cells:
            real = conn.run_cell(cell, timeout=60) if "Out[" not in cell and "_\n" not in cell else None
            assert real is None or real.status == "ok", (cell, real)
        # then one copied run of them all, each cell after the last one's marker: every cell's names are exported
        # (they share none but the libraries), and a false crash names its cell by the markers printed before it
        together = "".join(f"{cell}\nprint('cell {i} ran')\n" for i, cell in enumerate(cells))
        v = transplant(conn, together, 60.0)
        assert v.verdict == "no-crash", v
        assert [line for line in v.stdout.splitlines() if line.startswith("cell ")] == [
            f"cell {i} ran" for i in range(len(cells))], v.stdout
        assert v.transplant is not None and v.transplant.export_watch == "the kernel's shell queue", v
    finally:
        if env["name"] == "ipython9":
            conn.run_cell("jax.config.update('jax_enable_x64', False)")


def test_a_crash_that_rests_on_rebuilt_runtime_state_is_likely_the_others_certain(env):
    """Certain: a plain crash, one in a data library whose objects travel whole (pandas), (issue 42) one inside
    JAX, whose config the worker applied and proved equal to the kernel's, and (issue 42 part 2, dl-fresh) an
    overflow of the interpreter's or numpy 2's arithmetic (the kernel's interpreter on the kernel's machine).
    Likely: an environmental exception (the recursion limit)."""
    conn = env["conn"]
    v = transplant(conn, "q = [1, 2]\nq[5]", 60.0)
    assert v.verdict == "crash" and v.ename == "IndexError" and v.certain is True, v
    v = transplant(conn, "import pandas as pd\npd.DataFrame({'a': [1]})['b']", 60.0)
    assert v.verdict == "crash" and v.ename == "KeyError" and v.certain is True, v
    v = transplant(conn, "import math\nmath.exp(1000)", 60.0)
    assert v.verdict == "crash" and v.ename == "OverflowError" and v.certain is True, v
    v = transplant(conn, "def deep(n):\n    return deep(n + 1)\ndeep(0)", 60.0)
    assert v.verdict == "crash" and v.ename == "RecursionError" and v.certain is False, v
    if env["name"] == "ipython9":  # real JAX: its config carried and compared equal in the worker
        v = transplant(conn, "jnp.ones(3).reshape(2, 2)", 60.0)
        assert v.verdict == "crash" and v.certain is True, v
        v = transplant(conn, "import numpy as np\nnp.arange(250, 256, dtype=np.uint8) * 257", 60.0)  # numpy 2
        assert v.verdict == "crash" and v.ename == "OverflowError" and v.certain is True, v


# (the torch cases come after the others on `env`: from the first on, its kernel holds torch, which each of its
# workers then imports again)
TORCH = r"""
import torch
from torch import nn
class Net(nn.Module):  # a notebook module: torch pickles it by its __dict__, calling none of these
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        hit('forward ran in the kernel')
        return self.fc(x)
    def extra_repr(self):
        hit('extra_repr ran in the kernel')
        return 'net'
net = Net()
class Meta(type):  # a class attribute whose class's metaclass compares: `==` would run it
    def __eq__(cls, other):
        hit('A24 metaclass __eq__'); return False
    __hash__ = type.__hash__
class Tag(metaclass=Meta):
    pass
class Tagged(nn.Module):
    __tag__ = Tag()
    def forward(self, x):
        return x
tagged = Tagged()
_orig_obj_state = torch._utils._get_obj_state
def _patched_obj_state(obj):  # torch's Tensor.__reduce_ex__ reaches this through torch._utils
    hit('A25 patched torch._utils'); return _orig_obj_state(obj)
"""


def test_a_notebook_torch_module_is_copied_and_its_cells_get_the_real_verdict(env):
    """A notebook `nn.Module` (overriding `forward`, `extra_repr`, names torch defines): torch's pickling hook
    (`Module.__getstate__`) reaches none of them, so the copy is made and the cell runs in the worker (the old rule
    refused every notebook subclass overriding a library name: `unavailable`). Nothing of it runs in the kernel."""
    conn = env["conn"]
    skip_without_torch_in(conn)
    assert conn.run_cell(TORCH, timeout=180).status == "ok"
    conn.evaluate("HITS.clear()")
    with Untouched(conn) as watch:
        ok = transplant(conn, "print(net(torch.ones(1, 4)).shape)", 120.0)
        bad = transplant(conn, "net(torch.ones(1, 3))", 120.0)
    assert _hits(conn) == [] and watch.unchanged, (_hits(conn), watch.changes(), ok, bad)
    assert ok.verdict == "no-crash", ok
    assert bad.verdict == "crash" and bad.ename == "RuntimeError" and bad.certain is True, bad
    v = transplant(conn, "print(tagged)", 120.0)
    assert _hits(conn) == [] and v.verdict == "unavailable", (_hits(conn), v)
    conn.run_cell("torch._utils._get_obj_state = _patched_obj_state")
    try:
        v = transplant(conn, "print(net.fc.weight.sum())", 120.0)
        assert _hits(conn) == [] and v.verdict == "unavailable" and "notebook" in (v.reason or ""), (_hits(conn), v)
    finally:
        conn.run_cell("torch._utils._get_obj_state = _orig_obj_state")


TORCH_STATE = r"""
w = torch.ones(2, requires_grad=True)
(w * 3).sum().backward()  # torch's own pickling drops w.grad
torch.set_default_dtype(torch.float64)  # process-wide settings a fresh interpreter lacks
torch.set_grad_enabled(False)
"""


def test_torch_state_the_copy_carries_makes_its_crashes_certain_and_no_false_one(env):
    """What torch's pickling leaves out is carried (a leaf tensor's `.grad`, the default dtype, grad mode, the
    random state): each verdict equals the kernel's own run of the cell, and a crash in torch is certain (before,
    every torch crash of a copied run was only "likely", and `.grad` read after a copy was a crash that does not
    happen)."""
    conn = env["conn"]
    skip_without_torch_in(conn)
    assert conn.run_cell(TORCH, timeout=180).status == "ok"
    assert conn.run_cell(TORCH_STATE, timeout=60).status == "ok"
    cells = [("print(float(w.grad.sum()))", None),
             ("print(torch.ones(2, dtype=torch.float32) @ torch.tensor([1.0, 2.0]))", "RuntimeError"),
             ("(torch.ones(2, requires_grad=True) * 2).sum().backward()", "RuntimeError")]
    try:
        for cell, ename in cells:
            v = transplant(conn, cell, 120.0)
            real = conn.run_cell(cell, timeout=60)
            assert (real.status == "ok") == (ename is None), (cell, real)
            if ename is None:
                assert v.verdict == "no-crash", (cell, v)
            else:
                assert v.verdict == "crash" and v.ename == ename and v.certain is True, (cell, v)
    finally:
        conn.run_cell("torch.set_default_dtype(torch.float32); torch.set_grad_enabled(True)")
    # a tensor inside an autograd graph arrives as a leaf: what it does there is not the kernel's, never certain
    assert conn.run_cell("yy = torch.ones(2, requires_grad=True) * 2").status == "ok"
    v = transplant(conn, "yy.add_(1)", 120.0)
    assert conn.run_cell("yy.add_(1)").status == "ok"
    assert v.verdict != "crash" or v.certain is False, v


KERAS = r"""
import numpy as np, tensorflow as tf, keras
HITS = []
class MyLayer(keras.layers.Layer):
    def __init__(self, units=2, **kw):
        super().__init__(**kw)
        self.units = units
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], self.units))
    def call(self, x):
        return x @ self.w
    def get_config(self):
        HITS.append('A13 get_config')
        return {**super().get_config(), 'units': self.units}
class Sub(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(2)
    def call(self, x):
        return self.d(x)
    def save_own_variables(self, store):
        HITS.append('A14 save_own_variables')
        return super().save_own_variables(store)
X = np.random.rand(8, 4).astype('float32')
y = np.random.rand(8, 2).astype('float32')
m13 = keras.Sequential([keras.Input((4,)), MyLayer(2)])
m14 = Sub()
m14(X)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile(optimizer='adam', loss='mse')
model.fit(X, y, epochs=1, verbose=0)
model.class_names = ['a', 'b']
"""


def test_keras_notebook_code_never_runs_and_lost_attributes_are_never_a_certain_crash(tmp_path_factory):
    """TensorFlow/Keras 3 (today's environment): Keras's own pickling (model saving) would call a notebook
    layer's `get_config` and a subclassed model's `save_own_variables` in the kernel: never called there; the copy
    rebuilds them in the worker from what Keras recorded (shared/keras_layers.py) and runs the cell.
    A model's `history` and attributes the user set are not carried by Keras's serialization: the run is the
    real one's or a likely crash, never a certain one."""
    kernel = start_kernel(tmp_path_factory.mktemp("t30-keras"), python=kernel_python("ipython9"))
    try:
        conn = kernel.connection
        assert conn.run_cell(KERAS, timeout=300).status == "ok"
        # the notebook layer and the subclassed model in one copied run (each a worker importing TensorFlow
        # again): neither's code ran in the kernel, and each printed its own answer
        v = transplant(conn, "print('m13', m13.count_params())\nprint('m14', m14.d.units)", 120.0)
        assert _hits(conn) == [], (_hits(conn), v)
        assert v.verdict == "no-crash", v
        assert v.stdout.split("\n")[:2] == ["m13 8", "m14 2"], v
        for cell in ("print(model.history.history['loss'])", "print(model.class_names)"):
            assert conn.run_cell(cell, timeout=60).status == "ok"
            v = transplant(conn, cell, 120.0)
            assert v.verdict != "crash" or v.certain is False, (cell, v)
            assert v.verdict != "unavailable" or "busy" not in (v.reason or ""), (cell, v)
    finally:
        kernel.shutdown()

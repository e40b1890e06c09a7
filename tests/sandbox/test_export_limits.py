"""Issue 30, without a kernel: the export's memory floor reads the process's cgroup (v1 and v2, a fake cgroup
tree read by the same code), the cell's names are found in the daemon without IPython's transformer, and a
transplant worker starts with an allowlisted environment; the export's watch on the kernel's shell queue (real ZeroMQ
sockets, as ipykernel 7 builds them) sees a queued request without taking it, and is absent elsewhere."""

from __future__ import annotations

import asyncio
import select
import sys
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from crane.sandbox.cell_names import DYNAMIC_READ, cell_names, cell_strings
from crane.sandbox.kernel.shield import dumps, memory_headroom
from crane.sandbox.kernel.waiting import shell_watch
from crane.sandbox.transplant import worker_env

GiB = 1 << 30


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_cgroup_v2_headroom_is_max_minus_current_along_the_path(tmp_path):
    root = tmp_path / "cg"
    _write(root, "user/kernel/memory.max", f"{4 * GiB}\n")
    _write(root, "user/kernel/memory.current", f"{3 * GiB}\n")
    _write(root, "user/kernel/memory.stat", f"anon {3 * GiB}\ninactive_file 0\n")
    _write(root, "user/memory.max", "max\n")
    _write(root, "user/memory.current", f"{5 * GiB}\n")
    _write(tmp_path, "cgroup", "0::/user/kernel\n")
    _write(tmp_path, "meminfo", f"MemTotal: 100000000 kB\nMemAvailable: {64 * 1024 * 1024} kB\n")
    room = memory_headroom(str(root), str(tmp_path / "cgroup"), str(tmp_path / "meminfo"))
    assert room == GiB  # the container's 4 GiB, not the host's 64 GiB of /proc/meminfo


def test_cgroup_v1_headroom_discounts_reclaimable_cache_and_takes_the_tightest_ancestor(tmp_path):
    root = tmp_path / "cg"
    _write(root, "memory/a/b/memory.limit_in_bytes", f"{8 * GiB}\n")
    _write(root, "memory/a/b/memory.usage_in_bytes", f"{3 * GiB}\n")
    _write(root, "memory/a/b/memory.stat", f"total_inactive_file {GiB}\n")
    _write(root, "memory/a/memory.limit_in_bytes", f"{3 * GiB}\n")
    _write(root, "memory/a/memory.usage_in_bytes", f"{2 * GiB + GiB // 2}\n")
    _write(tmp_path, "cgroup", "4:memory:/a/b\n3:cpu:/\n")
    room = memory_headroom(str(root), str(tmp_path / "cgroup"), str(tmp_path / "nothing"))
    assert room == GiB // 2  # the parent's 3 GiB limit decides; the child's cache does not count as used


def test_no_cgroup_limit_falls_back_to_memavailable(tmp_path):
    _write(tmp_path, "cgroup", "0::/\n")
    _write(tmp_path, "cg/memory.max", "max\n")
    _write(tmp_path, "cg/memory.current", "123\n")
    _write(tmp_path, "meminfo", "MemAvailable: 2048 kB\n")
    assert memory_headroom(str(tmp_path / "cg"), str(tmp_path / "cgroup"), str(tmp_path / "meminfo")) == 2 << 20


def test_private_json_never_calls_a_subclass():
    class Evil(str):
        def __str__(self):
            raise AssertionError("called")

        def __repr__(self):
            raise AssertionError("called")

    assert dumps({"a": [Evil("x"), 1, 2.5, None, True]}) == '{"a":["x",1,2.5,null,true]}'


def test_cell_names_are_found_without_ipython_and_in_escapes_and_magics():
    assert {"double", "w", "z"} <= set(cell_names("%time z = double(w[:2])\nz.shape"))
    names = cell_names("files = !ls {d}\nfor f in files:\n    !echo {f} {g}\nprint(h)")
    assert {"d", "g", "h", "print"} <= set(names) and "files" in names
    assert {"df"} <= set(cell_names("%%time\nx = df.a.sum()"))
    assert {"conn"} <= set(cell_names("%%sql conn\nSELECT 1"))
    huge = "\n".join(f"v{i} = a + {i}" for i in range(8000)) + "\n" + "\n".join(f"!echo {{b}} {i}" for i in range(150))
    names = cell_names(huge)
    assert "a" in names and "b" in names


def test_a_cells_strings_are_named_apart_and_a_read_by_a_string_is_told_from_an_attribute():
    assert "model" not in cell_names("m = globals().get('model')")  # (a string's names: a guess, sent apart)
    assert cell_strings("m = globals().get('model')\nprint(f'{a} b_1')") == ["model", "b_1"]  # (`a`: a name)
    assert cell_strings("%time y = 1\nm = globals().get('model')") == ["model"]  # (read as cell_names reads it)
    assert cell_strings("%%bash\necho 'model'") == []  # (no Python part)
    for cell in ("m = globals().get('model')", "if 'model' in vars(): pass", "get_ipython().user_ns['model']",
                 "eval('model.fit(X)')", "exec(f'y = model')", "import __main__\ngetattr(__main__, 'model')",
                 "import sys\nsys.modules['__main__'].__dict__['model']", "assert 'model' in dir()",
                 "import __main__ as m\nm.model", "getattr(__main__, 'model')"):
        assert DYNAMIC_READ.search(cell), cell
    for cell in ("model.eval()", "df.agg('model')", "if __name__ == '__main__':\n    main()", "net.exec_(x)",
                 "getattr(model, 'coef_')"):
        assert not DYNAMIC_READ.search(cell), cell


def test_a_worker_starts_with_an_allowlisted_environment():
    env = {"LD_PRELOAD": "/x/evil.so", "PYTHONPATH": "/x", "PYTHONSTARTUP": "/x/s.py", "HOME": "/home/u",
           "KERAS_BACKEND": "jax", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/x", "LANG": "C.UTF-8", "SECRET": "s",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "LD_LIBRARY_PATH": "/x"}
    assert worker_env(env) == {"HOME": "/home/u", "KERAS_BACKEND": "jax", "LANG": "C.UTF-8",
                               "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


class _Obj:
    """A plain object with the given attributes, as ipykernel's own (traitlets) objects are: an instance dict read
    through the class's C `__dict__` descriptor (a SimpleNamespace's is a member descriptor, which the kernel-side
    reader does not take)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _kernel_like(zmq, parent_thread=None):
    """The objects ipykernel 7 keeps for its main shell (a real inproc PAIR the shell-channel thread forwards
    requests into, the main thread's stream over it, the main shell's asyncio lock), built here as its
    SubshellManager builds them."""
    ctx = zmq.Context.instance()
    frm, to = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    addr = f"inproc://crane-test-{uuid.uuid4().hex}"  # not id(): a collected, unclosed socket keeps its address
    frm.bind(addr)
    to.connect(addr)
    pair = _Obj(from_socket=frm, to_socket=to, to_stream=_Obj(socket=to))
    sct = _Obj(parent_thread=parent_thread or threading.current_thread(),
               _manager=_Obj(_shell_channel_to_main=pair))
    kernel = _Obj(shell_channel_thread=sct, _main_asyncio_lock=asyncio.Lock())
    return _Obj(kernel=kernel), frm, to


def test_the_shell_watch_sees_a_forwarded_request_without_taking_it():
    """A request forwarded to the main shell's queue is seen, again and again, and stays there: the descriptor
    the main thread's stream waits on is still readable after, and the request is received whole."""
    zmq = pytest.importorskip("zmq")
    shell, frm, to = _kernel_like(zmq)
    try:
        to.getsockopt(zmq.EVENTS)  # the stream's own look after its last request: the mailbox is drained
        waiting, what = shell_watch(shell)
        assert waiting is not None and what == "the kernel's shell queue"
        assert waiting() is False and waiting() is False
        frm.send_multipart([b"<IDS|MSG>", b"user's execute_request"])
        assert waiting() is True and waiting() is True  # seen, never consumed
        assert select.select([to.getsockopt(zmq.FD)], [], [], 0)[0]  # the stream's loop will still wake
        assert to.recv_multipart(zmq.NOBLOCK) == [b"<IDS|MSG>", b"user's execute_request"]
    finally:
        frm.close(0)
        to.close(0)


def test_the_shell_watch_sees_a_request_waiting_on_the_main_shells_lock():
    zmq = pytest.importorskip("zmq")
    shell, frm, to = _kernel_like(zmq)

    async def queued() -> bool:
        lock = shell.kernel._main_asyncio_lock
        await lock.acquire()  # CRANE's own request holds it
        waiting, _ = shell_watch(shell)
        assert waiting is not None and waiting() is False
        task = asyncio.ensure_future(lock.acquire())  # a request the main loop already took waits for it
        await asyncio.sleep(0)
        seen = waiting()
        lock.release()
        await task
        lock.release()
        return seen

    try:
        to.getsockopt(zmq.EVENTS)
        assert asyncio.run(queued()) is True
    finally:
        frm.close(0)
        to.close(0)


def test_no_shell_watch_where_the_kernel_is_not_ipykernel_7_shaped(monkeypatch):
    """Elsewhere the export's kernel-time cap alone bounds the user's wait, and the reason says why."""
    zmq = pytest.importorskip("zmq")
    assert shell_watch(SimpleNamespace(kernel=SimpleNamespace(shell_stream=None))) == (
        None, "the kernel has no shell-channel thread (ipykernel before 7, or not ipykernel)")
    other = threading.Thread(target=lambda: None)
    shell, frm, to = _kernel_like(zmq, parent_thread=other)
    try:
        assert shell_watch(shell)[0] is None
        shell.kernel.shell_channel_thread.parent_thread = threading.current_thread()
        shell.kernel.shell_channel_thread._manager._shell_channel_to_main.to_stream = SimpleNamespace(socket=frm)
        assert shell_watch(shell)[0] is None  # a stream over another socket: not the structure known
    finally:
        frm.close(0)
        to.close(0)
    monkeypatch.delitem(sys.modules, "zmq")
    assert shell_watch(SimpleNamespace()) == (None, "not a ZeroMQ kernel")

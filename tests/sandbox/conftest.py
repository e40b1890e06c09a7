"""Fixtures for sandbox tests: a real kernel (module-scoped), a second iopub client that records everything
the kernel publishes, a loopback listener, and snapshots of the user-visible kernel state."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import KERNEL_ENVS, kernel_python, python_kernel
from ..sacred import IopubWatcher


class Listener:
    """A loopback TCP server recording every connection and byte it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.1)
        self.udp_port = self.udp.getsockname()[1]
        # a local service on a UNIX socket (as a database server's), in /tmp: inside a private layer's place
        self.unix_dir = tempfile.mkdtemp(prefix="crane-sbx-service-")
        self.unix_path = os.path.join(self.unix_dir, "service.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen(4)
        self.unix.settimeout(0.1)
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                conn.settimeout(0.2)
                try:
                    self.received.append(b"<connect>" + conn.recv(4096))
                except OSError:
                    self.received.append(b"<connect>")
                conn.close()
            except (TimeoutError, OSError):
                pass
            try:
                self.received.append(b"<udp>" + self.udp.recv(4096))
            except (TimeoutError, OSError):
                pass
            try:
                conn, _ = self.unix.accept()
                self.received.append(b"<unix>")
                conn.close()
            except (TimeoutError, OSError):
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        self.udp.close()
        self.unix.close()
        shutil.rmtree(self.unix_dir, ignore_errors=True)


def tree_hash(root: Path) -> str:
    """Hash of every path, mode, size and content below root."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(root)}|{st.st_mode}|{st.st_size}".encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """A directory outside every place the sandbox gives a private layer (the kernel's working directory and
    its top-level directory, $HOME, /tmp, /var/tmp, /dev/shm) where this machine lets us create one, else a
    temporary one (then it is inside a layer: still private)."""
    made = None
    for base in ("/var/cache", "/var/lib", "/srv", "/opt"):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            made = Path(tempfile.mkdtemp(prefix="crane-sbx-outside-", dir=base))
            break
    d = made or tmp_path_factory.mktemp("outside")
    (d / "target.txt").write_text("outside, keep me\n")
    yield d
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, outside) -> Path:
    d = tmp_path_factory.mktemp("sbxwork")
    (d / "data.csv").write_text("a,b\n1,2\n3,4\n")
    (d / "sub").mkdir()
    (d / "sub" / "inner.txt").write_text("keep me\n")
    (d / "log.txt").write_text("log\n")
    (d / "outside_link").symlink_to(outside / "target.txt")
    return d


@pytest.fixture(scope="module")
def kernel(workdir):
    k = start_kernel(workdir)
    yield k
    k.shutdown()


@pytest.fixture(scope="module")
def conn(kernel):
    return kernel.connection


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def env_conn(request, workdir):
    """A kernel of each kernel environment (IPython 8 and 9: `KERNEL_ENVS`) that has run one cell, per module."""
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    assert kernel.connection.run_cell("base = 1", timeout=120).status == "ok"
    yield kernel.connection
    kernel.shutdown()


@pytest.fixture(scope="module", params=["3.12", "3.13"])
def newer_conn(request, workdir):
    """(version, connection) of a kernel on Python 3.12 and on 3.13 that has run one cell, per module."""
    kernel = start_kernel(workdir, python=python_kernel(request.param))
    assert kernel.connection.run_cell("base = 1", timeout=120).status == "ok"
    yield request.param, kernel.connection
    kernel.shutdown()


@pytest.fixture(scope="module")
def watcher(kernel):
    w = IopubWatcher(kernel.manager.get_connection_info())
    yield w
    w.close()


@pytest.fixture(scope="module")
def listener():
    lst = Listener()
    yield lst
    lst.close()

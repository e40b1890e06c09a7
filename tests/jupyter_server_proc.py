"""A real Jupyter Server for the remote-kernel tests: `python -m jupyter_server` on 127.0.0.1 with a token.

`JupyterServerProcess(root, ...)` starts it (a free port, the test's token, an optional base URL such as
JupyterHub's `/user/NAME/`, https with a self-signed certificate, the legacy JSON websocket protocol) and
waits until its kernels API answers; `.stop()` ends it (kernels included). As root it passes `--allow-root`.
Kernels it starts get CRANE's kernel environment (non-interactive matplotlib backend, fixed hash seed).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from crane.kernel.manager import KERNEL_ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and its key), made with `cryptography`."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class JupyterServerProcess:
    def __init__(self, root: Path, token: str = "crane-test-token", base_url: str = "/", https: bool = False,
                 legacy_protocol: bool = False, port: int | None = None, log_path: Path | None = None):
        self.root = Path(root)
        self.token = token
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.port = port or free_port()
        self.https = https
        self.cert: Path | None = None
        scheme = "https" if https else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}{self.base_url}"
        args = [
            sys.executable, "-m", "jupyter_server", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.root}",
            f"--IdentityProvider.token={token}", f"--ServerApp.base_url={self.base_url}",
            "--ServerApp.shutdown_no_activity_timeout=0",
        ]
        if legacy_protocol:
            args.append("--ZMQChannelsWebsocketConnection.kernel_ws_protocol=")
        if https:
            self.cert, key = self_signed_cert(self.root.parent if self.root.parent != self.root else self.root)
            args += [f"--ServerApp.certfile={self.cert}", f"--ServerApp.keyfile={key}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        env = {**os.environ, **KERNEL_ENV, "JUPYTER_RUNTIME_DIR": str(self.root.parent / f"runtime-{self.port}")}
        env.pop("JUPYTER_TOKEN", None)
        self.log_path = log_path or (self.root.parent / f"jupyter-server-{self.port}.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, cwd=str(self.root), env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            self._wait_ready(60)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.cert)) if self.cert else None
        req = urllib.request.Request(self.url + "api/kernels", headers={"Authorization": f"token {self.token}"})
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter_server exited ({self.proc.returncode}): {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter_server did not answer within {timeout} s: {self.log()[-2000:]}")
            time.sleep(0.1)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def kernels(self) -> list:
        """The server's running kernels (`KernelModel`s). jupyter_server answers HTTP 500 when a kernel goes away
        while it lists them: that answer is asked again (5 questions at most)."""
        from crane.kernel.errors import ServerError
        from crane.kernel.rest import ServerAPI

        api = ServerAPI(self.spec())
        for _ in range(4):
            try:
                return api.check()
            except ServerError as exc:
                if exc.status != 500:
                    raise
            time.sleep(0.2)
        return api.check()

    def kernel_ids(self) -> list[str]:
        return [k.id for k in self.kernels()]

    def spec(self, token: str | None = None):
        from crane.kernel.target import ServerSpec

        return ServerSpec.parse(self.url, token=token or self.token, env={},
                                ca_file=str(self.cert) if self.cert else None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


class TcpProxy:
    """A TCP relay on 127.0.0.1 to `port`, whose connections the test can cut (`drop_all`) as a network failure
    would, and which can refuse new ones (`pause`) or stop (`close`)."""

    def __init__(self, port: int):
        import threading

        self.target = port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self.accepted = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            with self._lock:
                self._pairs.append((client, upstream))
                self.accepted += 1
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop_all(self) -> int:
        """Cut every open connection (both sides see a reset/EOF); returns how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        return len(pairs)

    def pause(self) -> None:
        """The server is gone, as far as clients can tell: connections cut, new ones refused."""
        self._closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        self.drop_all()
        self._thread.join(2)

    def resume(self) -> None:
        """Accept connections again, on the same port."""
        import threading

        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.pause()

"""Where a kernel is: a local connection file, or a kernel id on a Jupyter Server (JupyterHub, a remote
Jupyter Server, Enterprise Gateway), and how to reach that server.

`ServerSpec` is the server: its base URL (any proxy prefix such as JupyterHub's `/user/NAME/` included, always
ending in `/`), its token and the CA file to trust for https. The token never appears in `repr`, `str` or
`display`. `KernelTarget` is what the CLI and the language server pass around instead of a bare connection
file path; `crane.kernel.client.KernelConnection.attach` and `.watch_client` accept either.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

from crane.errors import CraneError

# jupyter_server (and Enterprise Gateway) name a kernel's connection file after the kernel id.
_KERNEL_FILE = re.compile(r"kernel-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.json$")
_KERNEL_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,127}$")
# Front-end pages people copy from the browser's address bar: the API lives at the base URL before them.
_UI_SEGMENTS = ("lab", "tree", "notebooks", "edit", "doc", "voila")


class ServerSpecError(CraneError, ValueError):
    """A server URL or token that cannot be used (the message says why)."""


def _reconnect_window(raw: str) -> float:
    try:
        return max(0.5, float(raw)) if raw.strip() else 10.0
    except ValueError:
        return 10.0


@dataclass(frozen=True)
class ServerSpec:
    """A Jupyter Server's base URL (ending in '/'), its token and the CA file trusted for https."""

    url: str
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    reconnect_s: float = 10.0  # how long a dropped kernel websocket may take to come back

    @classmethod
    def parse(cls, url: str, token: str | None = None, env: Mapping[str, str] | None = None,
              ca_file: str | None = None) -> ServerSpec:
        """Normalise a URL as users paste it (`http://host:8888/user/me/lab?token=T` works). The token comes
        from `token`, else the URL's `?token=`, else `$JUPYTER_TOKEN`; the CA file from `ca_file`, else
        `$CRANE_JUPYTER_CA_FILE` (else the system's trust store, which honours `$SSL_CERT_FILE`); the reconnection
        window from `$CRANE_JUPYTER_RECONNECT_S` (seconds, at least 0.5; default 10): connection plumbing read
        here, where the spec is made at the edge, never below."""
        env = os.environ if env is None else env
        text = (url or "").strip()
        if not text:
            raise ServerSpecError("the Jupyter server URL is empty")
        if "://" not in text:
            raise ServerSpecError(f"not a URL: {text!r} (expected http://HOST:PORT/ or https://...)")
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ServerSpecError(f"unsupported scheme {parts.scheme!r} in {_hide_query(text)} (use http or https)")
        if not parts.hostname:
            raise ServerSpecError(f"no host in {_hide_query(text)}")
        try:
            _ = parts.port
        except ValueError as exc:
            raise ServerSpecError(f"bad port in {_hide_query(text)}: {exc}") from None
        query_tokens = parse_qs(parts.query).get("token") or []
        query_token = query_tokens[0] if query_tokens else None
        segments = [s for s in parts.path.split("/") if s]
        for i, seg in enumerate(segments):
            if seg in _UI_SEGMENTS:
                segments = segments[:i]
                break
        if segments[-1:] == ["api"]:
            segments = segments[:-1]
        path = "/" + "".join(s + "/" for s in segments)
        base = urlunsplit((scheme, parts.netloc.rsplit("@", 1)[-1], path, "", ""))
        tok = token if token else query_token if query_token else env.get("JUPYTER_TOKEN") or None
        return cls(url=base, token=tok, ca_file=ca_file or env.get("CRANE_JUPYTER_CA_FILE") or None,
                   reconnect_s=_reconnect_window(env.get("CRANE_JUPYTER_RECONNECT_S", "")))

    @property
    def secure(self) -> bool:
        return self.url.startswith("https://")

    @property
    def display(self) -> str:
        """The URL to show users and logs (never the token)."""
        return self.url

    def __str__(self) -> str:
        return self.url

    def api(self, *parts: str, query: Mapping[str, str] | None = None) -> str:
        """`<base>api/<parts...>` with each part URL-quoted."""
        path = "/".join(quote(p, safe="") for p in parts)
        out = f"{self.url}api/{path}" if path else f"{self.url}api"
        return f"{out}?{urlencode(dict(query))}" if query else out

    def channels_url(self, kernel_id: str, session_id: str) -> str:
        """The kernel channels websocket URL (ws:// or wss://)."""
        http = self.api("kernels", kernel_id, "channels", query={"session_id": session_id})
        return "ws" + http[len("http"):]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for https (system trust store, or `ca_file`); None for http."""
        if not self.secure:
            return None
        try:
            return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else ssl.create_default_context()
        except (OSError, ssl.SSLError) as exc:
            raise ServerSpecError(f"cannot load the CA file {self.ca_file}: {exc}") from None


def _hide_query(text: str) -> str:
    return text.split("?", 1)[0]


def kernel_id_from_connection_file(path: str) -> str | None:
    """The kernel id in a connection file name written by jupyter_server (`kernel-<uuid>.json`), or None."""
    m = _KERNEL_FILE.search(os.path.basename(path or ""))
    return m.group(1) if m else None


def check_kernel_id(kernel_id: str) -> str:
    """A kernel id fit to put in a URL path (jupyter_server's are UUIDs; gateways may use other names)."""
    if not isinstance(kernel_id, str) or not _KERNEL_ID.match(kernel_id):
        raise ServerSpecError(f"not a kernel id: {kernel_id!r}")
    return kernel_id


@dataclass(frozen=True)
class KernelTarget:
    """A kernel CRANE can connect to: a local connection file, or a kernel id on a Jupyter Server."""

    connection_file: str | None = None
    server: ServerSpec | None = None
    kernel_id: str | None = None

    def __post_init__(self) -> None:
        if (self.connection_file is None) == (self.server is None):
            raise ValueError("a kernel target is a connection file or a server kernel, not both")
        if self.server is not None:
            check_kernel_id(self.kernel_id or "")

    @classmethod
    def local(cls, connection_file: str) -> KernelTarget:
        return cls(connection_file=os.path.abspath(os.path.expanduser(connection_file)))

    @classmethod
    def remote(cls, server: ServerSpec, kernel_id: str) -> KernelTarget:
        return cls(server=server, kernel_id=kernel_id)

    @property
    def is_remote(self) -> bool:
        return self.server is not None

    def describe(self) -> str:
        """For users: the connection file, or 'remote kernel (URL)'."""
        if self.server is not None:
            return f"remote kernel ({self.server.display})"
        return str(self.connection_file)

    def short(self) -> str:
        """A short name for logs and thread names."""
        if self.server is not None:
            return f"{self.kernel_id} on {self.server.display}"
        return os.path.basename(str(self.connection_file))


def as_target(where: str | os.PathLike | KernelTarget) -> KernelTarget:
    """A connection file path or a target, as a target."""
    return where if isinstance(where, KernelTarget) else KernelTarget.local(os.fspath(where))

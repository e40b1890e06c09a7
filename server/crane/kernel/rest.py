"""A small client for the Jupyter Server REST API (kernels and sessions), token-authenticated.

Used to start CRANE's own kernels on a server (the CLI's `--server`), to check that a kernel exists before
attaching to it, to restart, interrupt and shut kernels down. Stdlib only (`urllib`), https with the server
spec's TLS context, redirects refused (JupyterHub answers a bad token with a redirect to its login page).
Answers are decoded into msgspec Structs at the edge; every failure is a `ServerError` whose message names
the server (never the token) and says what to check.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import msgspec

from crane.kernel.errors import ServerAuthError, ServerError, ServerNotFound, ServerUnreachable
from crane.kernel.target import ServerSpec, ServerSpecError, check_kernel_id


class KernelModel(msgspec.Struct):
    """`GET /api/kernels/{id}`."""

    id: str
    name: str = ""
    execution_state: str | None = None
    connections: int | None = None
    last_activity: str | None = None
    reason: str | None = None


class SessionModel(msgspec.Struct):
    """`POST /api/sessions` answer."""

    id: str
    kernel: KernelModel
    path: str | None = None
    name: str | None = None
    type: str | None = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 - refuse every redirect
        return None


def _opener(spec: ServerSpec) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_NoRedirect()]
    ctx = spec.ssl_context()
    if ctx is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    return urllib.request.build_opener(*handlers)


class ServerAPI:
    """REST calls to one Jupyter Server. Thread-safe (no shared mutable state)."""

    def __init__(self, spec: ServerSpec, timeout: float = 30.0):
        self.spec = spec
        self.timeout = timeout
        try:
            self._open = _opener(spec).open
        except ServerSpecError as exc:
            raise ServerError(str(exc)) from None

    # -- transport ----------------------------------------------------------------------------------
    def request(self, method: str, *path: str, body: Any = None, timeout: float | None = None,
                query: dict[str, str] | None = None) -> bytes:
        url = self.spec.api(*path, query=query)
        data = msgspec.json.encode(body) if body is not None else (b"" if method in ("POST", "PUT", "PATCH") else None)
        headers = {"Accept": "application/json", **self.spec.headers()}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        where = f"the Jupyter server at {self.spec.display}"
        try:
            with self._open(req, timeout=timeout or self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            detail = _reason(exc)
            if status in (401, 403):
                how = "no token was given (--token or JUPYTER_TOKEN)" if not self.spec.token else "check the token"
                raise ServerAuthError(f"{where} refused the request (HTTP {status}): {how}", status) from None
            if status in (301, 302, 303, 307, 308):
                raise ServerAuthError(
                    f"{where} redirected {method} {url.split('?', 1)[0]} to {exc.headers.get('Location', '?')}: "
                    "the token was not accepted, or the URL is not the server's base URL", status) from None
            if status == 404:
                raise ServerNotFound(f"{where}: not found: {method} /api/{'/'.join(path)}{detail}", status) from None
            raise ServerError(f"{where} answered HTTP {status} to {method} /api/{'/'.join(path)}{detail}", status) from None
        except urllib.error.URLError as exc:
            raise ServerUnreachable(f"cannot reach {where}: {exc.reason}") from None
        except (OSError, ValueError) as exc:  # timeouts, resets, malformed answers from a proxy
            raise ServerUnreachable(f"cannot reach {where}: {type(exc).__name__}: {exc}") from None

    def _json(self, typ: type, method: str, *path: str, body: Any = None) -> Any:
        raw = self.request(method, *path, body=body)
        try:
            return msgspec.json.decode(raw, type=typ)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ServerError(f"the server at {self.spec.display} answered {method} /api/{'/'.join(path)} with "
                              f"something that is not a Jupyter Server reply ({exc}): {raw[:120]!r}") from None

    # -- API ----------------------------------------------------------------------------------------
    def check(self) -> list[KernelModel]:
        """Raise unless the server answers the kernels API with this token (the running kernels)."""
        return self._json(list[KernelModel], "GET", "kernels")

    def has_file(self, path: str) -> bool | None:
        """Whether the server's contents API has `path` (relative to its root); None without a contents API
        (gateways), so the caller cannot tell."""
        try:
            self.request("GET", "contents", *[p for p in path.split("/") if p], query={"content": "0"})
            return True
        except ServerNotFound:
            pass
        try:
            self.request("GET", "contents", query={"content": "0"})
        except ServerNotFound:
            return None
        return False

    def kernel(self, kernel_id: str) -> KernelModel:
        return self._json(KernelModel, "GET", "kernels", check_kernel_id(kernel_id))

    def sessions(self) -> list[SessionModel]:
        return self._json(list[SessionModel], "GET", "sessions")

    def start_session(self, path: str, kernel_name: str | None = None) -> SessionModel:
        """Start a kernel for the notebook `path` (relative to the server's root) through the sessions API."""
        kernel: dict[str, Any] = {"name": kernel_name} if kernel_name else {}
        body = {"path": path, "name": path.rsplit("/", 1)[-1], "type": "notebook", "kernel": kernel}
        return self._json(SessionModel, "POST", "sessions", body=body)

    def start_kernel(self, path: str | None = None, kernel_name: str | None = None) -> KernelModel:
        """Start a bare kernel (`POST /api/kernels`; the only way on gateways without a sessions API)."""
        body: dict[str, Any] = {}
        if kernel_name:
            body["name"] = kernel_name
        if path is not None:
            body["path"] = path
        return self._json(KernelModel, "POST", "kernels", body=body)

    def delete_session(self, session_id: str) -> None:
        self.request("DELETE", "sessions", session_id)

    def shutdown_kernel(self, kernel_id: str) -> None:
        self.request("DELETE", "kernels", check_kernel_id(kernel_id))

    def restart_kernel(self, kernel_id: str) -> KernelModel:
        return self._json(KernelModel, "POST", "kernels", check_kernel_id(kernel_id), "restart")

    def interrupt_kernel(self, kernel_id: str) -> None:
        self.request("POST", "kernels", check_kernel_id(kernel_id), "interrupt")


def _reason(exc: urllib.error.HTTPError) -> str:
    """The server's own message from an error answer (jupyter_server sends {"message": ..., "reason": ...})."""
    try:
        body = exc.read(2000)
        data = msgspec.json.decode(body)
        msg = data.get("message") or data.get("reason") if isinstance(data, dict) else None
        return f": {str(msg)[:300]}" if msg else ""
    except Exception:
        return ""

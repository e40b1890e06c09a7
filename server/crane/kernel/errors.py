"""Errors raised by the kernel layer: each carries a message fit to show a user."""

from crane.errors import CraneError


class KernelError(CraneError):
    """A kernel could not be used."""


class KernelDead(KernelError):
    """The kernel process is gone or stopped answering its heartbeat."""


class KernelTimeout(KernelError):
    """A request got no reply within its timeout (the kernel may be busy running a user cell)."""


class KernelNotStarted(KernelTimeout):
    """The kernel did not start on a request within its start timeout (it runs a user cell, or is stuck)."""


class ServerError(KernelError):
    """A Jupyter Server (JupyterHub, Enterprise Gateway, ...) refused or failed a request."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status, when there was an answer


class ServerUnreachable(ServerError):
    """No answer from the Jupyter Server (wrong address, server down, network)."""


class ServerAuthError(ServerError):
    """The Jupyter Server refused the token (HTTP 401/403, or a redirect to a login page)."""


class ServerNotFound(ServerError):
    """The Jupyter Server does not know the kernel or session (HTTP 404): it was shut down or never existed."""


class ConnectionLost(KernelDead):
    """The kernel channels websocket dropped and could not be reconnected in time."""

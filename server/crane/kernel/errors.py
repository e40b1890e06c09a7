"""Errors raised by the kernel layer: each carries a message fit to show a user."""

from crane.errors import CraneError


class KernelError(CraneError):
    """A kernel could not be used."""


class KernelDead(KernelError):
    """The kernel process is gone or stopped answering its heartbeat."""


class KernelTimeout(KernelError):
    """A request got no reply within its timeout (the kernel may be busy running a user cell)."""

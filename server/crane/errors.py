"""`CraneError`: the root of every error CRANE raises on purpose. Each carries a message fit to show a user.

Layers subclass it (`KernelError`, `NotebookError`, `LLMError`, `SettingsError`, `SandboxError`, ...), so a
front-end can tell CRANE's own failures (a clear message, exit code 2 in the CLI) from bugs.
"""

from __future__ import annotations


class CraneError(Exception):
    """An error with a message for the user (no traceback needed)."""

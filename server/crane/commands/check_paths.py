"""Which notebooks `crane check PATH...` checks: files as given, folders searched for `*.ipynb`.

- A file argument is checked whatever its name (a pre-commit hook passes exactly the files to check).
- A folder is walked recursively; its `.ipynb` files are taken sorted by path (component by component),
  skipping hidden folders and files (a name starting with "."; `.ipynb_checkpoints` is one) below it — the
  folder given is searched even when its own name is hidden (`crane check .`). Symbolic links to folders are
  not followed (no cycles); a link to a file is a file.
- The same notebook reached twice (two arguments, a file inside a folder given too) is checked once, at its
  first position.
- A path that does not exist, a folder that cannot be listed, or a folder with no notebooks is an input error
  for that argument (a `Target` with `error`); the other arguments are still checked.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec


class Target(msgspec.Struct, frozen=True):
    """A notebook to check, or an argument that could not be used (`error` set)."""

    path: str
    error: str | None = None


def _hidden(name: str) -> bool:
    return name.startswith(".") and name not in (".", "..")


def _walk(folder: str, out: list[Target]) -> int:
    """Append the folder's notebooks (and unreadable sub-folders) to `out`; return how many notebooks."""
    notebooks: list[str] = []

    def onerror(exc: OSError) -> None:
        where = exc.filename or folder
        out.append(Target(str(where), f"cannot read folder {where}: {exc.strerror or exc}"))

    for root, dirs, files in os.walk(folder, onerror=onerror):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        notebooks.extend(os.path.join(root, f) for f in files if f.endswith(".ipynb") and not _hidden(f))
    notebooks.sort(key=lambda p: Path(p).parts)
    out.extend(Target(p) for p in notebooks)
    return len(notebooks)


def find_notebooks(paths: list[str]) -> list[Target]:
    """The notebooks to check and the arguments that could not be used, in command-line order."""
    found: list[Target] = []
    for arg in paths:
        if os.path.isdir(arg):
            before = len(found)
            if not _walk(arg, found) and len(found) == before:
                found.append(Target(arg, f"no notebooks (*.ipynb) under {arg} (hidden folders are skipped)"))
        elif os.path.lexists(arg):
            found.append(Target(arg))  # unreadable or not a notebook: reported when it is loaded
        else:
            found.append(Target(arg, f"cannot read {arg}: No such file or directory"))
    out: list[Target] = []
    seen: set[str] = set()
    for t in found:
        key = os.path.realpath(t.path) if t.error is None else f"error:{t.path}"
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out

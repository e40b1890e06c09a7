"""What can tell a portable run's view of the notebook's folder from the real folder (the view's files are links to
the real ones; paths resolve out of the view), so that a crash which went near it may be the view's, not the cell's:
never certain. Both sides: the worker's one-shot record (worker/portable.finish_portable: its `view_touched`) and a
portable session's crash in the daemon (transplant_session.TransplantSession.run). Standard library only.
"""

from __future__ import annotations

import re

# a call that looks at links, resolves paths or lists folders. (Round 14, h4: a `stat` or `is_file` that does not
# follow links — `follow_symlinks=False`, `symlinks=True`, `followlinks` — sees the view's link where the kernel sees a
# file: `os.stat(f, follow_symlinks=False).st_size`, `S_ISREG(... .st_mode)` filtering every file out made certain
# IndexError/KeyError crashes; the view's folders' link counts and file system differ too.)
VIEW_NAMES = re.compile(r"\b(?:islink|is_symlink|lstat|readlink|realpath|resolve|samefile|relative_to|relpath|"
                        r"walk|fwalk|rglob|glob|iglob|scandir|iterdir|listdir|is_junction|absolute|abspath|getcwd|"
                        r"cwd|inode|st_ino|st_dev|st_nlink|S_ISLNK|tarfile|make_archive|follow_symlinks|symlinks|"
                        r"followlinks|disk_usage|statvfs|fstatvfs)\b")
VIEW_FILES = ("os.py", "posixpath.py", "ntpath.py", "pathlib.py", "glob.py", "shutil.py", "genericpath.py",
              "tarfile.py", "zipfile.py", "filecmp.py")  # (tarfile stores a view link as a link: round 6, P6)


def view_sensitive(source: str, traceback: list, evalue: str, places: tuple[str, ...] = ()) -> bool:
    """The crashed cell looked at the file system in a way the run's view can answer differently from the real
    folder: its text names such a call, a frame of its `traceback` (lines "file:line ...") is in the path modules, or
    its message `evalue` names one of `places` (the view's or the real folder's path, which a view link leaks)."""
    if VIEW_NAMES.search(source):
        return True
    frames = [str(t).split(":", 1)[0] for t in traceback or []]
    if any(f.endswith(VIEW_FILES) for f in frames):
        return True
    return any(p and len(p) > 1 and p in evalue for p in places)

"""Which confinement a speculative run starts with, in the default "auto" mode.

The layered mode (private copy-on-write layers in new namespaces) costs a second page-table copy of the kernel
and a few mounts: about twice the blocking mode's fork-and-verdict overhead. Most cells have no side effect at
all, so "auto" runs a cell in the cheaper blocking confinement unless its text shows a sign of side effects
(`needs_layer`: file writes, programs, worker processes, shell escapes and magics, temporary files), and
re-runs it in layered mode when the blocking run refused anything but the network (`layer_would_help`): the
verdict is then the layered run's. Signs are a speed heuristic only; the re-run makes the result the same as
always running layered. Long runs (miniatures, background runs) start layered.
"""

from __future__ import annotations

import re

from crane.sandbox.verdict import SandboxVerdict

AUTO_BLOCKING_REASON = "no sign of side effects in the cell; a refused one re-runs it in a private layer"
ASKED_FOR = "the blocking confinement was asked for"

_SIGNS = re.compile(
    r"\.(?:to_(?:csv|excel|parquet|json|pickle|feather|hdf|sql|stata|html|latex|markdown|xml|orc|clipboard)|"
    r"savefig|save|savez|savez_compressed|savetxt|tofile|dump|write|writelines|write_text|write_bytes|mkdir|"
    r"makedirs|rename|replace|unlink|remove|rmdir|rmtree|touch|symlink_to|hardlink_to|chmod|export|to_netcdf)\s*\("
    r"|\b(?:open|mkdir|makedirs|rename|remove|unlink|rmtree|copy|copy2|copyfile|copytree|move|system|popen|Popen|"
    r"fork|spawn\w*|exec[lv]p?e?|Pool|Process|ProcessPoolExecutor|Parallel|mkstemp|mkdtemp|NamedTemporaryFile|"
    r"TemporaryFile|TemporaryDirectory|connect|urlretrieve|ZipFile|TarFile|ExcelWriter|HDFStore|SummaryWriter|"
    r"to_file)\s*\("
    r"|\b(?:subprocess|multiprocessing|concurrent\.futures|joblib|sqlite3|shutil|tempfile|wandb|mlflow|"
    r"tensorboard|n_jobs|num_workers|pool|workers)\b"
    r"|^\s*[!%]",
    re.M,
)

_NETWORK_ONLY = re.compile(r"network|socket|connection|name resolution|url|http|ftp|smtp|pop|imap|nntp|telnet",
                           re.I)


def needs_layer(source: str) -> bool:
    """The cell's text shows a sign of side effects (see the module docstring)."""
    return bool(_SIGNS.search(source))


def layer_would_help(v: SandboxVerdict) -> bool:
    """A blocking run that refused something a private layer would allow (a write, a program, a process)."""
    if v.verdict != "blocked" or v.mode != "blocking" or v.mode_reason != ASKED_FOR:
        return False
    refused = list(v.denied) or [v.reason or ""]
    return not all(_NETWORK_ONLY.search(d) for d in refused)

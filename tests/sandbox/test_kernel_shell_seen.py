"""The copy's interpreter as a notebook sees its kernel's (round 16, F2/F5): the worker's `sys.argv` was `['-c']`, so
the classic `parser.parse_args()` of a notebook ran clean in the copy (a false no-crash: in a kernel it fails on
ipykernel's `-f <connection file>`); its shell's class was IPython's terminal `InteractiveShell`, so a notebook's
`type(get_ipython()).__name__ == 'ZMQInteractiveShell'` check failed, and `%matplotlib inline` (the first line of
countless notebooks) was a certain false NotImplementedError ("Implement enable_gui in a subclass"). Now the worker
takes the kernel's argv and its shell's class name, with ipykernel's `enable_gui`. The six paths agree with the
kernel (the fork path is the kernel's own), IPython 8 and 9."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
PARSER = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float, default=0.1)\n"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
def test_parse_args_fails_on_the_kernels_command_line(pk, path):
    v = path_verdict(pk, path, PARSER + "args = p.parse_args()", _served)
    assert (v.verdict, v.ename, v.line) == ("crash", "SystemExit", 4), v
    clean = path_verdict(pk, path, PARSER + "args, _ = p.parse_known_args()\nassert args.lr == 0.1", _served)
    assert (clean.verdict, clean.ename) == ("no-crash", None), clean


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", [
    "assert type(get_ipython()).__name__ == 'ZMQInteractiveShell'",
    "import sys\nassert any(a.endswith('.json') for a in sys.argv), sys.argv",
    "%matplotlib inline\nimport matplotlib\nassert 'inline' in matplotlib.get_backend()",
    "%pylab inline\nassert 'inline' in matplotlib.get_backend()",
], ids=["shell-class", "argv", "matplotlib-inline", "pylab-inline"])
def test_what_a_notebook_asks_of_its_kernel(pk, path, cell):
    v = path_verdict(pk, path, cell, _served)
    if path in ("fork session", "transplant session") and v.verdict == "blocked":  # (sessions refusing writes:
        assert "matplotlib" in (v.reason or ""), v  # matplotlib's import makes its config folder where it is missing)
        return
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_a_magic_the_copys_shell_lacks_is_no_certain_crash(pk, path):
    """A magic the notebook registered (or an extension loaded) is the kernel's shell's, not the copy's: a copy's
    "magic function not found" is only likely, naming it (round 16, F3: a certain false UsageError)."""
    conn = pk["conn"]
    assert conn.run_cell("from IPython.core.magic import register_line_magic\n"
                         "@register_line_magic\ndef shout(line):\n    return line.upper()\n", timeout=60).status == "ok"
    v = path_verdict(pk, path, "loud = %shout hi\nassert loud == 'HI'", _served)
    assert (v.verdict, v.ename, v.certain) == ("crash", "UsageError", False), v
    assert "the magic %shout is not the copy's" in (v.reason or ""), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
def test_cd_keeps_its_directory_history_in_the_copy(pk, path):
    """`%cd` writes the shell's directory history into its store (`db`): the worker's is kept in memory, not in the
    worker's profile folder outside the run (IPython 9 made it at the first use: `blocked`, round 16 F11)."""
    v = path_verdict(pk, path, "%cd sub\nimport os\nassert os.path.basename(os.getcwd()) == 'sub'\n%cd ..", _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("fork")])
@pytest.mark.parametrize("cell", ["%history -l 1", "%rerun", "m = get_ipython().run_line_magic('recall', '1')"])
def test_a_cell_reading_the_input_history_is_only_likely_in_a_copy(pk, path, cell):
    """The copy's shell records no input history (`%rerun` of a raising cell ran clean there, `%macro` of an earlier
    line failed: round 16, F4): whatever its run says is only likely."""
    v = path_verdict(pk, path, cell, _served)
    assert v.verdict in ("crash", "no-crash") and not v.certain, v
    assert "input history" in (v.reason or ""), v

"""The harness of the guard-in-interpreter scripts (`guard_in_interpreter.py`, `handed_in_interpreter.py`,
`handed_anywhere_in_interpreter.py`), which tests run in each interpreter the machine has (3.11's profile hook,
3.12+'s `sys.monitoring`): imported from the scripts' own folder, standard library only. `load_guard`: the guard's
parts compiled as the worker compiles them; `run_cell`: one cell under the installed guard; `run_cells`: each
checked against what it should have refused, printed, and the process's exit status (1 if one was not so)."""
import os
import sys
import types
from collections.abc import Callable

PARTS = ("kernel/shield.py", "kernel/library.py", "worker/guard.py")  # (library needs shield's own_c, as in the worker)


def load_guard(root: str) -> types.ModuleType:
    """The guard's parts under `root` (server/crane/sandbox), `# kernel: strip` lines taken out, in one module."""
    mod = types.ModuleType("g")
    for f in PARTS:
        with open(os.path.join(root, f)) as fh:
            text = fh.read()
        text = "\n".join("" if ln.rstrip().endswith("# kernel: strip") else ln for ln in text.splitlines())
        exec(compile(text, "<crane-kernel/" + f + ">", "exec"), mod.__dict__)
    return mod


def run_cell(guard, refused: list, src: str) -> tuple[object, list]:
    """`src` run as a cell under `guard` (installed as a run installs it): how it was installed, what it refused."""
    del refused[:]
    guard.trust(run_cell.__code__)
    code = compile(src, "<crane-sandbox-cell>", "exec")
    how = guard.install()
    try:
        exec(code, {"__name__": "__main__"})
    except BaseException:
        pass
    finally:
        guard.uninstall()
    return how, list(refused)


def run_cells(guard, refused: list, pre: str, cells: dict[str, str], bad: int = 0,
              refuses: Callable[[str], bool] = lambda name: name != "honest") -> int:
    """Each of `cells` (after `pre`) run and checked: refused where `refuses(name)`, else not. Prints a line per
    cell and a summary (`<version> bad <n>`, with the `bad` counted before); the exit status to leave with."""
    for name, src in cells.items():
        how, got = run_cell(guard, refused, pre + src)
        ok = bool(got) == refuses(name)
        bad += not ok
        print("ok " if ok else "BAD", name, how, got[:1])
    print(sys.version.split()[0], "bad", bad)
    return 1 if bad else 0

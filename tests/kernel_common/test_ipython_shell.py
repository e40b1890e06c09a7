"""kernel_common/ipython_shell.py, the one finder of the kernel's shell and namespace the probe, the fork sandbox and
the transplant export share: the shell `get_ipython()` returns and its own namespace, found without calling the
notebook's `get_ipython`, a `user_ns` property, or a planted key's `__hash__`/`__eq__` (in `sys.modules`, the
module's and the class's dicts, the shell's instance dict). In a fresh interpreter with IPython's shell (no kernel:
the same singleton an ipykernel kernel holds; the kernel paths are covered by test_probe_shell, test_fork_shell and
test_export_by_construction on IPython 8 and 9)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import crane.kernel_common.ipython_shell as finder

SCRIPT = textwrap.dedent("""
    import gc, sys
    sys.path.insert(0, {root!r})
    from IPython.core.interactiveshell import InteractiveShell
    import IPython
    shell = InteractiveShell.instance()
    real_ns = shell.user_ns
    calls = []

    class Planted:
        def __init__(self, name):
            self.name = name
        def __hash__(self):
            calls.append(("hash", self.name))
            return hash(self.name)
        def __eq__(self, other):
            calls.append(("eq", self.name))
            return False

    def wrapper():
        calls.append(("get_ipython",))
        return None

    IPython.get_ipython = wrapper
    import IPython.core.getipython as g
    g.get_ipython = wrapper
    def plant(d, name):  # a planted key probed before the real one (it takes the real one's first slot)
        value = d.pop(name, None)
        d[Planted(name)] = None
        if value is not None:
            d[name] = value

    plant(sys.modules, "IPython.core.interactiveshell")
    plant(vars(sys.modules["IPython.core.interactiveshell"]), "InteractiveShell")
    plant(gc.get_referents(InteractiveShell.__dict__)[0], "_instance")
    for name in ("_user_ns", "user_ns"):
        plant(object.__getattribute__(shell, "__dict__"), name)
    calls.clear()
    exec(open({path!r}).read(), ns := {{"__name__": "kc"}})
    found = ns["ipython_shell"]()
    space = ns["shell_namespace"](found)
    seen = list(calls)
    print(found is shell, space is real_ns, type(space) is dict, seen == [], seen)
""")


def _run(**kw) -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(__import__("pathlib").Path(finder.__file__)
                                                                          .parents[2]), path=finder.__file__)],
                         capture_output=True, text=True, timeout=120, **kw)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_shell_and_its_namespace_are_found_and_nothing_of_the_notebooks_runs():
    assert _run().startswith("True True True True"), _run()


def test_no_shell_and_no_namespace_outside_ipython():
    assert finder.shell_namespace(None) is None
    assert finder.shell_namespace(object()) is None

    class Odd:
        @property
        def __dict__(self):  # type: ignore[override]  # a notebook's property in place of the instance dict: never called
            raise AssertionError("called")

    assert finder.shell_namespace(Odd()) is None


@pytest.mark.parametrize("key", ["_user_ns", "user_ns"])
def test_the_namespace_is_read_under_either_ipython_name(key):
    class Shell:
        pass

    s = Shell()
    ns: dict = {"x": 1}
    s.__dict__[key] = ns
    assert finder.shell_namespace(s) is ns
    s.__dict__[key] = ["not", "a", "dict"]
    assert finder.shell_namespace(s) is None

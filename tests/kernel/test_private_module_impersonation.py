"""Issue 42: a private kernel module is called only as the very module this process's install made
(kernel/private_module: its address, `object.__repr__`, as the install reported it). A module of the notebook's at
the same name holding our VERSION, before CRANE's first call or after it, is installed over and never called."""

from __future__ import annotations

import pytest

from crane.kernel import private_module
from crane.kernel.manager import start_kernel
from crane.kernel.private_module import KernelModule, ModuleClient

from ..kernel_envs import KERNEL_ENVS, kernel_python

FAKE = (
    "import sys, types\nCALLED = []\n_fake = types.ModuleType({name!r})\n_fake.VERSION = {version!r}\n"
    "_fake.add = lambda a, b: (CALLED.append((a, b)), 'fake')[1]\nsys.modules[{name!r}] = _fake"
)


def test_a_module_of_the_notebooks_with_our_version_is_never_called(tmp_path):
    part = tmp_path / "demo.py"
    part.write_text("def add(a, b):\n    return a + b\n")
    module = KernelModule("_crane_test_impersonated", "a test module", [part])
    fake = FAKE.format(name=module.name, version=module.version)
    with start_kernel(tmp_path) as kernel:
        conn = kernel.connection
        # before this process's first call (a daemon that has installed nothing here yet)
        assert conn.run_cell(fake).status == "ok"
        client = ModuleClient(conn, module)
        assert client.call("add", 2, 3, timeout=10, what="demo") == 5
        assert (client.installs, client.replaced) == (0, 1)  # (not a fresh kernel: a module was replaced)
        # after it: the notebook's module, with the real one's namespace copied, put at the name
        assert conn.run_cell(f"_real = sys.modules[{module.name!r}]\n{fake}\n"
                             "_fake.__dict__.update({k: v for k, v in _real.__dict__.items() if k != 'add'})").status == "ok"
        assert client.call("add", 1, 1, timeout=10, what="demo") == 2
        assert (client.installs, client.replaced) == (0, 2)
        assert conn.evaluate(f"sys.modules[{module.name!r}] is not _fake") is True
        # another client of this process reuses the module this process installed (no install)
        assert ModuleClient(conn, module).call("add", 4, 4, timeout=10, what="demo") == 8
        assert (client.installs, client.replaced) == (0, 2)
        # a new daemon (nothing installed by it) installs first, whatever is there
        private_module._installed(conn).clear()
        other = ModuleClient(conn, module)
        assert other.call("add", 5, 5, timeout=10, what="demo") == 10
        assert (other.installs, other.replaced) == (0, 1)
        # the module gone (a restarted kernel): an install counted as such
        conn.evaluate(f"__import__('sys').modules.pop({module.name!r}) and None")
        assert other.call("add", 6, 6, timeout=10, what="demo") == 12
        assert (other.installs, other.replaced) == (1, 1)
        assert conn.evaluate("CALLED") == []


def test_the_connections_of_one_process_share_its_install(tmp_path):
    """The language server holds several connections to one kernel (its attachment, a background run's, an agent's
    fix run's): they call the module this process installed, never install over each other (each install over
    one cost a reinstall, ~0.1-1 s, at every alternation: review of c0b8d58)."""
    from crane.kernel.client import KernelConnection

    part = tmp_path / "demo.py"
    part.write_text("def add(a, b):\n    return a + b\n")
    module = KernelModule("_crane_test_shared", "a test module", [part])
    with start_kernel(tmp_path) as kernel:
        conns = [KernelConnection.attach(str(kernel.manager.connection_file), timeout=60) for _ in range(2)]
        try:
            clients = [ModuleClient(c, module) for c in conns]
            for i in range(3):
                for client in clients:
                    assert client.call("add", i, 1, timeout=10, what="demo") == i + 1
            assert [(client.installs, client.replaced) for client in clients] == [(1, 0), (0, 0)]
        finally:
            for conn in conns:
                conn.close()


# -- issue 42: the seal (kernel/private_module._BOOTSTRAP) ----------------------------------------------------------
# The daemon keeps the address of the install's seal, a weak reference to the module rooted for the kernel's life:
# a module of the notebook's at a freed module's address, or CRANE's module with a function, a class's method or a
# code object the notebook rebound, is installed over and never called; the collector is off while CRANE's install
# and calls run (no finalizer of the notebook's runs on their allocations).

PART = ("def add(a, b):\n    return a + b\n\n\nclass Adder:\n    def add(self, a, b):\n        return a + b\n\n\n"
        "def via_class(a, b):\n    return Adder().add(a, b)\n")
HITS = "import gc, sys, types\nCALLED = []\n"


def _client(tmp_path, kernel_env: str, name: str):
    part = tmp_path / "demo.py"
    part.write_text(PART)
    module = KernelModule(name, "a test module", [part])
    kernel = start_kernel(tmp_path, python=kernel_python(kernel_env))
    return module, kernel


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_module_of_the_notebooks_at_a_freed_modules_address_is_never_called(tmp_path, kernel_env):
    """The notebook frees CRANE's module (its table entry deleted, the collector run) and makes its own at the same
    address, holding the freed one's namespace (its VERSION and seal included) and a function of its own. Before the
    seal, the daemon's address check (`object.__repr__` of the module) passed it and called the notebook's `add`."""
    module, kernel = _client(tmp_path, kernel_env, "_crane_test_reused")
    with kernel:
        conn = kernel.connection
        client = ModuleClient(conn, module)
        assert client.call("add", 2, 3, timeout=10, what="demo") == 5
        # (freed once nothing holds it: a reference the kernel's machinery keeps for a moment after the call above,
        # seen once under CI load, is waited for, by a weak reference, before the address is sought)
        reuse = (
            f"{HITS}import threading, weakref\n_old = sys.modules.pop({module.name!r})\n"
            "_ns, _at, _gone = dict(_old.__dict__), id(_old), weakref.ref(_old)\ndel _old\n"
            "for _ in range(200):\n    gc.collect()\n    if _gone() is None:\n        break\n"
            "    threading.Event().wait(0.05)\n"
            "HELD = [] if _gone() is None else sorted({type(r).__name__ for r in gc.get_referrers(_gone())})\n"
            "_made = []\n"
            "for _ in range(200000):\n"
            f"    _made.append(types.ModuleType({module.name!r}))\n"
            "    if id(_made[-1]) == _at:\n        break\n"
            "_fake = _made.pop()\ndel _made\n"
            "_fake.__dict__.update(_ns)\n_fake.add = lambda a, b: (CALLED.append((a, b)), 'fake')[1]\n"
            f"sys.modules[{module.name!r}] = _fake\nREUSED = id(_fake) == _at")
        assert conn.run_cell(reuse, timeout=120).status == "ok"
        assert conn.evaluate("HELD") == []  # (the freed module was freed: what still held it, else)
        assert conn.evaluate("REUSED") is True  # (the notebook's module is at the freed one's address)
        assert client.call("add", 1, 1, timeout=10, what="demo") == 2
        assert conn.evaluate("CALLED") == []
        assert conn.evaluate(f"sys.modules[{module.name!r}] is not _fake") is True
        assert client.replaced == 1


REBIND = {
    "module-function": "_m.add = lambda a, b: (CALLED.append('add'), 'fake')[1]",
    "class-method": "_m.Adder.add = lambda self, a, b: (CALLED.append('Adder.add'), 'fake')[1]",
    "code-object": "_m.add.__code__ = (lambda a, b: (CALLED.append('code'), 'fake')[1]).__code__",
    "class-method-code": "_m.Adder.add.__code__ = (lambda self, a, b: (CALLED.append('code'), 'fake')[1]).__code__",
    "new-global": "_m.Adder = type('Adder', (), {'add': lambda self, a, b: (CALLED.append('Adder'), 'fake')[1]})",
}


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_function_the_notebook_rebinds_in_cranes_module_is_never_called(tmp_path, kernel_env):
    """Before the seal, the module at the address the daemon kept was called whatever it bound: each rebinding
    below ran the notebook's function."""
    module, kernel = _client(tmp_path, kernel_env, "_crane_test_rebound")
    with kernel:
        conn = kernel.connection
        client = ModuleClient(conn, module)
        assert client.call("add", 2, 3, timeout=10, what="demo") == 5
        assert client.call("via_class", 2, 3, timeout=10, what="demo") == 5
        assert conn.run_cell(HITS, timeout=60).status == "ok"
        for i, (case, patch) in enumerate(sorted(REBIND.items())):
            assert conn.run_cell(f"_m = sys.modules[{module.name!r}]\n{patch}", timeout=60).status == "ok", case
            function = "add" if case in ("module-function", "code-object") else "via_class"
            assert client.call(function, i, 1, timeout=10, what="demo") == i + 1, case
            assert conn.evaluate("CALLED") == [], case
            assert client.replaced == i + 1, case
        # an unchanged module is called as it is (no install at every call)
        assert client.call("add", 7, 1, timeout=10, what="demo") == 8
        assert client.replaced == len(REBIND)


FINALIZERS = r"""
import gc, sys
CRANE_FRAMES = []
KEEP_GOING = [True]
RAN = [0]
class Litter:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it, running __del__
    def __del__(self):
        RAN[0] += 1
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_filename.startswith('<crane-kernel'):
                CRANE_FRAMES.append((f.f_code.co_filename, f.f_code.co_name, f.f_lineno))
                break
            f = f.f_back
        if KEEP_GOING[0]:
            Litter()  # garbage for the next collection
for _ in range(50):
    Litter()
_thresholds = gc.get_threshold()
gc.set_threshold(1, 1, 1)
"""


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_no_finalizer_of_the_notebooks_runs_in_cranes_frames(tmp_path, kernel_env):
    """The notebook leaves cyclic garbage with `__del__` behind at every collection and makes the collector run at
    nearly every allocation: CRANE's install (a first one, and one over a rebound module) and its calls run with the
    collector off, so no finalizer runs with a frame of CRANE's kernel-side code on the stack. Before, the install's
    allocations ran them inside `<crane-kernel/...>` frames."""
    module, kernel = _client(tmp_path, kernel_env, "_crane_test_finalizers")
    with kernel:
        conn = kernel.connection
        assert conn.run_cell(FINALIZERS, timeout=60).status == "ok"
        try:
            ran = conn.evaluate("RAN[0]")
            client = ModuleClient(conn, module)
            assert client.call("via_class", 2, 3, timeout=10, what="demo") == 5
            assert conn.run_cell(f"sys.modules[{module.name!r}].add = lambda a, b: 0", timeout=60).status == "ok"
            assert client.call("via_class", 2, 3, timeout=10, what="demo") == 5
            ran = conn.evaluate("RAN[0]") - ran
        finally:
            conn.run_cell("KEEP_GOING[0] = False\ngc.set_threshold(*_thresholds)\ngc.collect()", timeout=60)
        assert conn.evaluate("CRANE_FRAMES") == []
        assert conn.evaluate("gc.isenabled()") is True
        assert ran > 0  # (the collector did run around CRANE's requests)
        assert client.replaced == 1

"""Issue 42: a private kernel module is called only as the very module this process's install made
(kernel/private_module: its address, `object.__repr__`, as the install reported it). A module of the notebook's at
the same name holding our VERSION, before CRANE's first call or after it, is installed over and never called."""

from __future__ import annotations

from crane.kernel import private_module
from crane.kernel.manager import start_kernel
from crane.kernel.private_module import KernelModule, ModuleClient

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

"""The private kernel-module installer: marked import lines are blanked (line numbers kept), every bundle
compiles on its own with the standard library only, and a real kernel installs, calls and reinstalls it
without a trace in the user's namespace or history."""

from __future__ import annotations

import ast
import sys

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.private_module import MISSING, KernelModule, ModuleClient, strip_marked
from crane.probe.collect import PROBE_MODULE
from crane.sandbox.fork_runner import SANDBOX_MODULE


def test_strip_marked_blanks_single_and_parenthesised_imports_keeping_line_numbers():
    text = (
        "import os\n"
        "from crane.x import a  # kernel: strip\n"
        "from crane.y import (  # kernel: strip\n"
        "    b,\n"
        "    c,\n"
        ")\n"
        "VALUE = 1\n"
    )
    out = strip_marked(text).splitlines()
    assert out == ["import os", "", "", "", "", "", "VALUE = 1"]


@pytest.mark.parametrize("module", [PROBE_MODULE, SANDBOX_MODULE], ids=lambda m: m.name)
def test_bundles_compile_alone_and_import_only_the_standard_library(module: KernelModule):
    namespace: dict = {}
    for filename, text in module.sources:
        tree = ast.parse(text, filename=filename)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module.split(".")[0] in sys.stdlib_module_names | {"IPython"}, (filename, node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in sys.stdlib_module_names | {"IPython"}, (filename, alias.name)
        exec(compile(text, filename, "exec"), namespace)
    assert len(module.version) == 16


def test_install_call_reinstall_in_a_real_kernel(tmp_path):
    part = tmp_path / "demo.py"
    part.write_text("def add(a, b):\n    return a + b\n\n\ndef boom():\n    raise ValueError('no')\n")
    module = KernelModule("_crane_test_demo", "a test module", [part])
    with start_kernel(tmp_path) as kernel:
        conn = kernel.connection
        client = ModuleClient(conn, module)
        assert client.call("add", 2, 3, timeout=10, what="demo") == 5
        assert client.installs == 1
        assert client.call("add", "a", "b", timeout=10, what="demo") == "ab"
        assert client.installs == 1
        conn.evaluate(f"__import__('sys').modules.pop({module.name!r}) and None")
        assert client.call("add", 1, 1, timeout=10, what="demo") == 2
        assert client.installs == 2
        with pytest.raises(Exception, match="ValueError: no"):
            client.call("boom", timeout=10, what="demo")
        assert conn.evaluate(f"{module.name!r} in get_ipython().user_ns") is False
        assert conn.evaluate("get_ipython().execution_count") == 1
        seal = client.address
        assert seal is not None
        assert conn.evaluate(module.call_expression("add", 1, 2, seal=seal)) == 3
        assert conn.evaluate(module.call_expression("add", 1, 2, seal=seal).replace(module.version, "other")) == MISSING
        assert conn.evaluate(module.call_expression("add", 1, 2, seal=seal._replace(seal="<not the seal>"))) == MISSING
        assert conn.evaluate(module.call_expression("add", 1, 2, seal=seal._replace(holder="<not>"))) == MISSING
        assert conn.evaluate(module.call_expression("add", 1, 2, seal=seal._replace(code="<not>"))) == MISSING

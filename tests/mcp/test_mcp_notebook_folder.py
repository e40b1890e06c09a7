"""`notebook` arguments name notebooks of the folders the server serves only (its working folder when it started,
--notebook's folder, the kernel's working folder): any other path, a `..` path out of them or a link in them to
a notebook elsewhere, is a tool error saying so, and nothing of it is read. A real `crane mcp` over stdio."""

from __future__ import annotations

import shutil

from .conftest import mcp_client, text_of
from .test_mcp_stdio import _cf


async def test_notebooks_outside_the_served_folders_are_refused(kernel, notebook, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(notebook, elsewhere / "secret.ipynb")
    link = notebook.parent / "link_to_elsewhere.ipynb"
    link.symlink_to(elsewhere / "secret.ipynb")
    home = tmp_path / "server_home"  # the server's own working folder: neither the kernel's nor `elsewhere`
    home.mkdir()
    try:
        async with mcp_client("--connection-file", _cf(kernel), cwd=home) as client:
            ok = await client.call_tool("crane_check_cell", {"notebook": str(notebook), "cell": 2,
                                                            "mode": "static"})
            assert not ok.is_error, text_of(ok)  # the kernel's working folder is served
            for given in (str(elsewhere / "secret.ipynb"), str(notebook.parent / ".." / elsewhere.parent.name /
                                                                "elsewhere" / "secret.ipynb"), str(link), "/etc/passwd"):
                res = await client.call_tool("crane_check_cell", {"notebook": given, "cell": 1, "mode": "static"})
                assert res.is_error and "outside the folders this server serves" in text_of(res), (given, res)
    finally:
        link.unlink()

"""Fixtures for the MCP server tests: a real kernel holding a small state (the user's), a notebook whose
executed cells made that state, a loopback listener, and `mcp_client`: the SDK's own stdio client talking to a
real `crane mcp` subprocess."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, ReadResourceResult, TextContent, TextResourceContents

from crane.kernel.manager import start_kernel

from ..cli.conftest import make_notebook
from ..sandbox.conftest import Listener

STATE = "import pandas as pd\ndf = pd.DataFrame({'price': [1.0, None, 3.0], 'city': ['a', 'b', 'c']})\nn = 41\n"
CELLS: list[tuple[str, int | str | None]] = [
    (STATE, 1),
    ("n = n + 1\nprint(n)", 2),
    ("total = df['Price'].sum()", None),  # KeyError: the column is 'price'
    ("1 / 0", None),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mcpwork")


@pytest.fixture(scope="module")
def kernel(workdir):
    k = start_kernel(workdir)
    for source, count in CELLS:
        if count is not None and count != "md":
            run = k.connection.run_cell(source, timeout=120)
            assert run.status == "ok", run
    yield k
    k.shutdown()


@pytest.fixture(scope="module")
def conn(kernel):
    return kernel.connection


@pytest.fixture(scope="module")
def notebook(workdir) -> Path:
    return make_notebook(workdir / "analysis.ipynb", CELLS)


@pytest.fixture(scope="module")
def listener():
    lst = Listener()
    yield lst
    lst.close()


def server_params(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> StdioServerParameters:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")}
    return StdioServerParameters(command=sys.executable, args=["-m", "crane", "mcp", *args], env={**base, **(env or {})},
                                 cwd=str(cwd) if cwd else None)


@contextlib.asynccontextmanager
async def mcp_client(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    async with Client(server_params(*args, cwd=cwd, env=env), read_timeout_seconds=300) as client:
        yield client


def text_of(res: CallToolResult) -> str:
    """The text of a tool result's first content block (crane's tools answer with text)."""
    block = res.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def resource_text(res: ReadResourceResult) -> str:
    """The text of a resource read's first contents (crane's resources are JSON text)."""
    contents = res.contents[0]
    assert isinstance(contents, TextResourceContents), contents
    return contents.text

"""A restart hands the notebook over from the old kernel process to the new one while the old attachment may
still be closing (a request in flight to the dead process holds its connection for seconds): whatever order
the two finish in, the notebook ends attached to the new process and says so. In-process, on the supervisor
(`crane.lsp.kernels.KernelSupervisor`), with attachments whose `close` the test holds open: the order is set by
events, not by timing. (The real restart, with real kernels and the real server, is in test_jupyter_bridge.py
and the e2e `jupyter` scenario, where this race showed under load: "kernel dead" after the new attach.)"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from crane.kernel.target import as_target
from crane.lsp import kernels as kernels_mod
from crane.lsp.kernels import GONE, KernelSupervisor
from crane.lsp.messages import KernelInfo
from crane.lsp.notebook_session import NotebookSession
from crane.lsp.settings import Tuning


class _Host:
    """The parts of `crane.lsp.host.Host` the supervisor uses when it attaches and lets go."""

    def __init__(self) -> None:
        self.tuning = Tuning()
        self.sessions: dict[str, NotebookSession] = {}
        self.statuses: list[Any] = []  # every crane/kernelStatus it sent, in order
        self.workspace = SimpleNamespace(get_notebook_document=lambda **_: None)  # no cells to re-check

    def notify(self, method: str, params: Any) -> None:
        if method == "crane/kernelStatus":
            self.statuses.append(params)

    def call_soon_threadsafe(self, fn, *args) -> None:
        asyncio.get_running_loop().call_soon_threadsafe(fn, *args)

    def call_later(self, delay, fn, *args) -> None:
        asyncio.get_running_loop().call_later(delay, fn, *args)

    def spawn(self, aw):
        return asyncio.ensure_future(aw)


def _attachment(path: str, close) -> SimpleNamespace:
    return SimpleNamespace(
        target=as_target(path),
        info=KernelInfo(connection_file=path, source="jupyter-extension"),
        busy=False, alive=True, close=close,
    )


@pytest.fixture
def held_close():
    """A `close` that blocks until released; `closing` is set once it was called."""
    closing, release = threading.Event(), threading.Event()

    def close() -> None:
        closing.set()
        release.wait(60)

    yield SimpleNamespace(close=close, closing=closing, release=release)
    release.set()


def _states(host: _Host) -> list[str]:
    return [s["state"] for s in host.statuses]


async def _supervised(host: _Host) -> tuple[KernelSupervisor, NotebookSession]:
    sup = KernelSupervisor(host, analysis=None)  # type: ignore[arg-type]
    session = NotebookSession(uri="file:///w/nb.ipynb", path=None)
    sup._attach_lock[session.uri] = asyncio.Lock()
    return sup, session


async def test_the_new_process_named_while_the_old_one_closes_stays_attached(tmp_path, monkeypatch, held_close):
    host = _Host()
    sup, session = await _supervised(host)
    old = _attachment(str(tmp_path / "kernel-old.json"), held_close.close)
    session.attachment, session.state = old, "attached"
    # the old process is gone with its file: the supervisor lets go of it, and its close hangs
    letting_go = asyncio.ensure_future(sup._let_go(session, old, GONE))
    assert await asyncio.to_thread(held_close.closing.wait, 30), "the old attachment was never closed"
    assert session.attachment is None and _states(host)[-1] == "dead"

    # meanwhile the client names the new process's file
    new_file = tmp_path / "kernel-new.json"
    new_file.write_text("{}")
    new = _attachment(str(new_file), lambda: None)
    monkeypatch.setattr(kernels_mod, "attach", lambda *args: new)
    ok, message = await sup._try_attach(session, str(new_file), "jupyter-extension")
    assert ok, message
    assert session.attachment is new and _states(host)[-1] == "attached"

    held_close.release.set()  # now the old close returns
    await letting_go
    assert session.attachment is new
    assert session.state == "attached" and _states(host)[-1] == "attached", _states(host)


async def test_attaching_says_the_new_kernel_before_the_old_one_has_closed(tmp_path, monkeypatch, held_close):
    host = _Host()
    sup, session = await _supervised(host)
    old = _attachment(str(tmp_path / "kernel-old.json"), held_close.close)
    session.attachment, session.state = old, "attached"
    new_file = tmp_path / "kernel-new.json"
    new_file.write_text("{}")
    new = _attachment(str(new_file), lambda: None)
    monkeypatch.setattr(kernels_mod, "attach", lambda *args: new)
    attaching = asyncio.ensure_future(sup._try_attach(session, str(new_file), "jupyter-extension"))
    assert await asyncio.to_thread(held_close.closing.wait, 30), "the replaced attachment was never closed"
    # the old one is still closing: the notebook already uses and shows the new one
    assert session.attachment is new and _states(host)[-1] == "attached"
    held_close.release.set()
    ok, _ = await attaching
    assert ok and session.attachment is new and session.state == "attached"

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
        self.statuses: list[Any] = []  # every crane/kernelStatus it sent, in order
        self.workspace = SimpleNamespace(get_notebook_document=lambda **_: None)  # no cells to re-check
        self.settings = SimpleNamespace(speculative_on=False)  # no worker prepared (crane.lsp.prewarm: not tested here)

    def notify(self, method: str, params: Any) -> None:
        if method == "crane/kernelStatus":
            self.statuses.append(params)

    def states(self) -> list[str]:
        return [s["state"] for s in self.statuses]


def _attachment(path: str, close) -> SimpleNamespace:
    return SimpleNamespace(
        target=as_target(path),
        info=KernelInfo(connection_file=path, source="jupyter-extension"),
        busy=False, alive=True, close=close,
    )


@pytest.fixture
def handover(tmp_path, monkeypatch):
    """A notebook attached to the old process, whose `close` blocks until `release` is set (`closing` is set once
    it was called), and the new process's file and attachment, which `attach` hands out."""
    closing, release = threading.Event(), threading.Event()

    def held_close() -> None:
        closing.set()
        release.wait(60)

    host = _Host()
    sup = KernelSupervisor(host, analysis=None)  # type: ignore[arg-type]  # a stand-in host, no analysis needed
    session = NotebookSession(uri="file:///w/nb.ipynb", path=None)
    sup._attach_lock[session.uri] = asyncio.Lock()
    old = _attachment(str(tmp_path / "kernel-old.json"), held_close)
    session.attachment, session.state = old, "attached"  # type: ignore[assignment]  # a stand-in attachment
    new_file = tmp_path / "kernel-new.json"
    new_file.write_text("{}")
    new = _attachment(str(new_file), lambda: None)
    monkeypatch.setattr(kernels_mod, "attach", lambda *args: new)
    yield SimpleNamespace(host=host, sup=sup, session=session, old=old, new=new, new_file=str(new_file),
                          closing=closing, release=release)
    release.set()


async def test_the_new_process_named_while_the_old_one_closes_stays_attached(handover):
    h = handover
    # the old process is gone with its file: the supervisor lets go of it, and its close hangs
    letting_go = asyncio.ensure_future(h.sup._let_go(h.session, h.old, GONE))
    assert await asyncio.to_thread(h.closing.wait, 30), "the old attachment was never closed"
    assert h.session.attachment is None and h.host.states()[-1] == "dead"

    # meanwhile the client names the new process's file
    ok, message = await h.sup._try_attach(h.session, h.new_file, "jupyter-extension")
    assert ok, message
    assert h.session.attachment is h.new and h.host.states()[-1] == "attached"

    h.release.set()  # now the old close returns
    await letting_go
    assert h.session.attachment is h.new
    assert h.session.state == "attached" and h.host.states()[-1] == "attached", h.host.states()


async def test_attaching_says_the_new_kernel_before_the_old_one_has_closed(handover):
    h = handover
    attaching = asyncio.ensure_future(h.sup._try_attach(h.session, h.new_file, "jupyter-extension"))
    assert await asyncio.to_thread(h.closing.wait, 30), "the replaced attachment was never closed"
    # the old one is still closing: the notebook already uses and shows the new one
    assert h.session.attachment is h.new and h.host.states()[-1] == "attached"
    h.release.set()
    ok, _ = await attaching
    assert ok and h.session.attachment is h.new and h.session.state == "attached"

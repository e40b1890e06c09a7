"""Language server: the attached kernel's transplant worker prepared before the first copied run needs it
(crane.sandbox.prewarm), whenever the kernel's modules may have changed — on attach, after a restart, after each
user run (kernels.py calls `kernel_changed`).

One prewarm per attachment at a time, in the background (a private request on the attachment's I/O thread, then
a worker started at background priority); a change while one is under way runs it once more afterwards. None
while the kernel runs a user cell (the next run's end asks again), none when speculative runs are off, none for
a kernel behind a Jupyter Server. What it did is logged; nothing is shown to the user (the verdict's text says
whether its worker was warm or fresh).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crane.lsp.host import Host
    from crane.lsp.kernel_attach import Attachment
    from crane.lsp.notebook_session import NotebookSession

log = logging.getLogger(__name__)


class Prewarmer:
    def __init__(self, host: Host) -> None:
        self.host = host
        self._again: dict[int, bool] = {}  # id(attachment) -> asked again while its prewarm runs

    def kernel_changed(self, session: NotebookSession, att: Attachment) -> None:
        """The kernel's modules may have changed: prepare (or refresh) its worker in the background."""
        if not self.host.settings.speculative_on or att.target.is_remote:
            return
        key = id(att)
        if key in self._again:
            self._again[key] = True
            return
        self._again[key] = False
        self.host.spawn(self._run(session, att, key))

    async def _run(self, session: NotebookSession, att: Attachment, key: int) -> None:
        from crane.sandbox.prewarm import prewarm_kernel

        try:
            while not session.closed and session.attachment is att and att.alive:
                if not att.busy:
                    try:
                        done = await self.host.run_blocking(att.run, prewarm_kernel, att.conn,
                                                            self.host.settings.sandbox_options())
                        log.info("prewarm for %s: %s", att.target.short(), done.why)
                    except Exception as exc:  # the kernel did not answer: the next change asks again
                        log.info("prewarm for %s failed: %s", att.target.short(), exc)
                if not self._again.get(key):
                    return
                self._again[key] = False
        finally:
            self._again.pop(key, None)

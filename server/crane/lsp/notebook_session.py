"""Per-notebook state: the attached kernel, the last facts, what each source said, the cell scheduler.

`facts_for` is the one place the analysis threads get runtime facts from. It never waits long behind a
running user cell: when the watcher says the kernel is busy, or the probe times out, it answers from the
facts cache and says "stale"; with no kernel (or a dead one) it answers nothing and says "static". While
nothing ran in the kernel since the same request was answered (the watcher saw no other client's request
that could run code, no restart; the session's generation is the same), that answer is still live and is
given again without a round trip; the probe itself also reuses what it computed (its epoch is the same state).

The sandbox's verdicts, the model's answers and the verified quick fixes are kept per (cell text, kernel state
generation): typing back the same text, or re-checking a cell, reuses them; any change of the kernel's state (`kernel_changed`) makes
them inapplicable. `crane.lsp.diagnostics.final_findings` reads them through `crane.policy.decide`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from crane.lsp.facts_cache import FactsCache
from crane.lsp.messages import KernelSource, KernelState
from crane.lsp.notebook_map import CellSnapshot
from crane.pipeline import FactsMode

if TYPE_CHECKING:
    from crane.finding import Finding
    from crane.fixes.model import SearchReport, VerifiedFix
    from crane.lsp.kernel_attach import Attachment
    from crane.lsp.scheduler import CellScheduler
    from crane.policy import ModelAnswer
    from crane.probe.facts import ProbeRequest, ProbeResult
    from crane.sandbox.verdict import RunMode, SandboxVerdict

log = logging.getLogger(__name__)

__all__ = ["CellOutcome", "FactsMode", "FixEntry", "NotebookSession", "StateCache"]

V = TypeVar("V")
STATE_CACHE_SIZE = 256


@dataclass
class CellOutcome:
    """One cell's last check: the rules' findings and the facts they used (`crane.pipeline.CellCheck`)."""

    cell: CellSnapshot
    findings: list[Finding]
    mode: FactsMode
    probe: ProbeResult | None = None
    error: str | None = None
    elapsed_ms: float = 0.0


class StateCache(Generic[V]):
    """Answers about cell texts against one kernel state generation, bounded (least recently used out).
    Used from the event loop only."""

    def __init__(self, size: int = STATE_CACHE_SIZE):
        self.size = size
        self._items: OrderedDict[tuple[str, int], V] = OrderedDict()

    def has(self, source: str, gen: int) -> bool:
        return (source, gen) in self._items

    def get(self, source: str, gen: int) -> V | None:
        value = self._items.get((source, gen))
        if value is not None:
            self._items.move_to_end((source, gen))
        return value

    def put(self, source: str, gen: int, value: V) -> None:
        self._items[(source, gen)] = value
        self._items.move_to_end((source, gen))
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def discard(self, source: str, gen: int) -> None:
        self._items.pop((source, gen), None)

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class FixEntry:
    """The verified quick fixes of one cell text against one kernel state, as they arrive
    (crane.lsp.quick_fixes)."""

    fixes: list[VerifiedFix] = field(default_factory=list)
    done: bool = False
    report: SearchReport | None = None


@dataclass
class CellRecord:
    """What the session knows about one cell (by cell URI): one record, so forgetting a cell forgets it all."""

    findings: list[Finding] | None = None  # published (None: nothing published yet)
    rule_findings: list[Finding] | None = None  # the rules' findings of its last check (None: never checked)
    outcome: CellOutcome | None = None  # its last check
    stale: bool = False  # its diagnostics rely on stale facts (the kernel was busy)
    last_edit: float = 0.0  # loop time of its last text edit
    exec_order: int | None = None  # the client's execution order
    # ((cell text, kernel_gen), follow-ups asked in a row after resumable answers: crane.lsp.checks)
    resume: tuple[tuple[str, int], int] | None = None


@dataclass
class NotebookSession:
    uri: str  # the notebook URI as the client sent it
    path: str | None
    attachment: Attachment | None = None
    # (crane.kernel.target.KernelTarget, how it was found)
    requested: tuple[Any, KernelSource] | None = None  # a kernel the client named (crane/attachKernel)
    last_kernel: tuple[Any, KernelSource] | None = None  # the kernel that died or restarted: tried first
    state: KernelState = "static-only"
    status_message: str = ""
    facts: FactsCache = field(default_factory=FactsCache)
    used_stale: bool = False  # some published diagnostics rely on stale facts
    cells: dict[str, CellRecord] = field(default_factory=dict)  # cell URI -> what is known about it
    sandbox_verdicts: StateCache[SandboxVerdict] = field(default_factory=StateCache)
    model_answers: StateCache[ModelAnswer | None] = field(default_factory=StateCache)  # None: asked, no answer
    quick_fixes: StateCache[FixEntry] = field(default_factory=StateCache)  # verified fixes (crane.lsp.quick_fixes)
    kernel_gen: int = 0  # bumped whenever the kernel's state may have changed (keys the sandbox/LLM caches)
    run_seconds: dict[str, float] = field(default_factory=dict)  # cell text -> how long the user's last run took
    sandbox_mode: tuple[RunMode, str | None] | None = None  # (mode, why not layered) of the last speculative run
    scheduler: CellScheduler | None = None
    closed: bool = False
    on_kernel_failure: Any = None  # callable(exc), set by the supervisor; called from worker threads
    on_kernel_restart: Any = None  # callable(), idem
    _probe_lock: threading.Lock = field(default_factory=threading.Lock)

    def cell(self, uri: str) -> CellRecord:
        """The record of cell `uri` (made empty on first use)."""
        rec = self.cells.get(uri)
        if rec is None:
            rec = self.cells[uri] = CellRecord()
        return rec

    def known(self, uri: str) -> CellRecord:
        """The record of cell `uri` if there is one, else an empty one that is not kept (for reading)."""
        return self.cells.get(uri) or CellRecord()

    @property
    def stale_cells(self) -> list[str]:
        """Cells whose diagnostics rely on stale facts."""
        return [u for u, r in self.cells.items() if r.stale]

    def facts_for(
        self, request: ProbeRequest, timeout: float, complete: bool = False
    ) -> tuple[ProbeResult | None, FactsMode, str | None]:
        """Runtime facts for one cell's probe request: (result, mode, error). Blocking: worker threads only.
        A `resumable` answer (exact passes over large values left for later requests) is given as it is, and
        the caller asks again (`crane.lsp.checks` schedules it); `complete`: ask again here until it is not."""
        from crane.kernel.errors import KernelDead, KernelError, KernelTimeout

        att = self.attachment
        if att is None or not att.alive:
            return None, "static", None
        if att.busy:
            return self.facts.lookup(request), "stale", None
        state: tuple[str, int, int] | None = self._kernel_state(att)  # read before asking (then any later
        # activity makes the answer older than the state it is filed under, never newer)
        reused = self.facts.reuse(request, state)
        if reused is not None:
            return reused, "live", None
        try:
            with self._probe_lock:
                probe = att.probe_client()
                installs = probe.installs
                asked = msgspec.structs.replace(request, epoch=f"{state[0]}:{state[1]}") if state else request
                result = att.run(probe.run, asked, timeout, complete)
                if installs and probe.installs > installs:  # our probe module vanished: the kernel restarted
                    self.facts.clear()
                    self._signal(self.on_kernel_restart)
                    state = None
        except KernelTimeout as exc:
            log.info("probe timed out (%s): using the last facts", exc)
            return self.facts.lookup(request), "stale", str(exc)
        except KernelDead as exc:
            self._failed(exc)
            return None, "static", str(exc)
        except KernelError as exc:
            self._failed(exc)
            return self.facts.lookup(request), "stale", str(exc)
        if att is not self.attachment:  # reattached meanwhile: these facts belong to the old kernel
            return self.facts.lookup(request), "stale", None
        self.facts.store(request, result)
        if state is not None:
            self.facts.remember(request, state, result)
        return result, "live", None

    def _kernel_state(self, att: Attachment) -> tuple[str, int, int]:
        """What names the kernel's state from here: the attachment (its connection's session), what its
        watcher saw other clients do, and this session's generation (bumped on runs the client reports)."""
        from crane.lsp.kernel_attach import session_id

        return (session_id(att.conn), att.watch.activity, self.kernel_gen)

    def kernel_changed(self) -> None:
        """The kernel's state may have changed (a cell ran, it restarted, another kernel): results computed
        against the old state (speculative runs, LLM answers) no longer apply."""
        self.kernel_gen += 1

    def _failed(self, exc: Exception) -> None:
        self._signal(self.on_kernel_failure, exc)

    @staticmethod
    def _signal(handler: Any, *args: Any) -> None:
        if handler is not None:
            try:
                handler(*args)
            except Exception:
                log.exception("kernel event handler")

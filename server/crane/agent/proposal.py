"""What the agent streams and returns: `AgentStep` (one action, as `crane/agentStep`) and `Proposal` (the
edits, additions and cells to run first, with the explanation, the sandbox evidence and the usage).

A proposal is only a proposal: nothing here applies it. `to_workspace_edit` turns it into an LSP
`WorkspaceEdit` (TextEdits on the cell URIs, every edit carrying a ChangeAnnotation with
`needsConfirmation: true`, so VS Code shows its refactor preview); `unified_diff` renders it for the CLI.
Wire names are camelCase.
"""

from __future__ import annotations

import difflib
from typing import Literal

import msgspec

from crane.agent.sandboxes import SandboxKind
from crane.llm.schema import Usage

StepPhase = Literal["proposed", "done"]
ProposalStatus = Literal["fixed", "not-fixed", "stopped", "error", "clean"]
StepStatus = Literal["ok", "refused", "error", "stopped"]


class StepUsage(msgspec.Struct, rename="camel"):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None

    @classmethod
    def of(cls, u: Usage) -> StepUsage:
        """A request's usage (crane.llm.schema.Usage) as a step's."""
        return cls(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                   cached_tokens=u.cached_tokens, cost_usd=u.cost_usd)

    def __add__(self, other: StepUsage) -> StepUsage:
        cost = None if self.cost_usd is None and other.cost_usd is None else (self.cost_usd or 0) + (other.cost_usd or 0)
        return StepUsage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                         self.cached_tokens + other.cached_tokens, cost)


class AgentStep(msgspec.Struct, rename="camel", omit_defaults=False):
    """One action of the agent (`crane/agentStep`). In step mode it is sent twice: `phase: "proposed"` before
    the action runs (waiting for the user's go-ahead) and `phase: "done"` with its result."""

    run_id: str
    step: int  # 1-based
    phase: StepPhase
    reflection: str
    action: str  # the tool: edit_cell | add_cell | execute_cell | inspect | finish; "reply" (no tool call)
    cell: int | None = None
    code: str = ""  # the cell source or expression the action carries
    result: str = ""  # the observation sent back to the model
    status: StepStatus = "ok"
    tokens: int = 0  # prompt + completion tokens of the model request behind this step
    usage: StepUsage = msgspec.field(default_factory=StepUsage)
    elapsed_s: float = 0.0


class CellEdit(msgspec.Struct, rename="camel"):
    cell: int  # 1-based number in the notebook
    old: str
    new: str


class CellAddition(msgspec.Struct, rename="camel"):
    cell: int  # the number the agent used for it (after the notebook's last cell)
    after: int  # inserted after this notebook cell (0: at the top)
    source: str


class Evidence(msgspec.Struct, rename="camel", omit_defaults=True):
    """The verification run: the cells run in a fresh sandbox (in order), then the target."""

    sandbox: SandboxKind
    ran: list[int]  # cells run before the target, in order (edited, added, or never-run cells)
    target: int
    status: str  # the target's outcome: ok | error | timeout | ...
    ename: str | None = None
    evalue: str | None = None
    traceback: str = ""
    stdout: str = ""
    failed_before: list[str] = []  # cells in `ran` that raised ("cell 3: KeyError: ...")
    # False: the target's outcome is only "likely" for the user's kernel (a run on a copy of its state that may have
    # missed what it rests on, or a miniature: `doubt` says why; issue 42, h5)
    certain: bool = True
    doubt: str = ""


class AgentUsage(msgspec.Struct, rename="camel"):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None  # None when no request was priced
    unpriced_requests: int = 0


class CallStats(msgspec.Struct, rename="camel"):
    """The model's tool calls over a run: `usable` ones were read and run (a repeat within one reply counted
    once); `lost` ones could not be read, each with the reason; `usable_turns`: replies with a usable call (the
    focused asks, which want code and no tool call, apart)."""

    usable: int = 0
    usable_turns: int = 0
    repeated: int = 0  # identical calls repeated within one reply (run once)
    lost: list[str] = []
    # the focused asks (crane.agent.focused: the failing line put to the model alone, code back, no tools):
    # requests sent, and the changes their replies made that ran in the sandbox
    focused_requests: int = 0
    focused_tried: int = 0
    focused_fixed: bool = False  # the accepted fix is a focused ask's change


class Proposal(msgspec.Struct, rename="camel", omit_defaults=False):
    run_id: str
    notebook: str | None
    target: int
    status: ProposalStatus
    fixed: bool  # the target ran clean in the verification run, and the guard holds
    stop_reason: str  # "finished", "step limit (10 steps)", "token budget ...", "stopped by the user", ...
    explanation: str = ""
    edits: list[CellEdit] = []
    additions: list[CellAddition] = []
    run_first: list[int] = []  # cells to run, in order, before the target (includes edited and added cells)
    evidence: Evidence | None = None
    guard: list[str] = []  # guard refusals during the run (and on the final diff)
    steps: int = 0
    usage: AgentUsage = msgspec.field(default_factory=AgentUsage)
    model: str = ""
    elapsed_s: float = 0.0
    log: list[AgentStep] = []  # every step, as streamed (phase "done")
    calls: CallStats = msgspec.field(default_factory=CallStats)
    # the crash the run repaired, observed in the sandbox: certain for the user's kernel (None: recorded in the
    # notebook, or none observed); False: only "likely" (seen on a copy of the kernel's state that may have missed
    # what it rests on, `crash_doubt` says why), and a fix is "verified against a likely crash" (issue 42, h5)
    crash_certain: bool | None = None
    crash_doubt: str = ""

    @property
    def changes_code(self) -> bool:
        return bool(self.edits or self.additions)

    @property
    def verification(self) -> str:
        """How the fix was verified, in words (crane.fixes.model.verification_words): "verified", "verified against
        a likely crash", "verified by a likely clean run", or both."""
        from crane.fixes.model import verification_words

        return verification_words(self.crash_certain, self.evidence is None or self.evidence.certain)

    def summary(self) -> str:
        how = f" ({self.verification})" if self.fixed and self.verification != "verified" else ""
        if self.fixed and not self.changes_code and self.run_first:
            cells = ", ".join(str(c) for c in self.run_first)
            return f"no code change needed: run cell{'s' if len(self.run_first) > 1 else ''} {cells} first{how}"
        if self.fixed:
            from crane.agent.removals import removal_note

            drops = "; ".join(f"cell {e.cell} {note}" for e in self.edits if (note := removal_note(e.old, e.new)))
            return f"fixed{how}: {len(self.edits)} cell edit(s), {len(self.additions)} new cell(s)" + \
                (f" — {drops}" if drops else "")
        return f"not a fix ({self.stop_reason})"


# -- WorkspaceEdit for the LSP daemon ---------------------------------------------------------------------------
def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def minimal_text_edit(old: str, new: str) -> dict | None:
    """One TextEdit replacing only the lines that differ (whole lines), or None when nothing changes."""
    if old == new:
        return None
    a, b = old.split("\n"), new.split("\n")
    pre = 0
    while pre < min(len(a), len(b)) - 1 and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < min(len(a), len(b)) - pre - 1 and a[-1 - suf] == b[-1 - suf]:
        suf += 1
    # replace lines a[pre : len(a)-suf] (the last of them up to its end) by b[pre : len(b)-suf]
    end_line = len(a) - suf - 1
    new_text = "\n".join(b[pre: len(b) - suf])
    return {
        "range": {"start": {"line": pre, "character": 0},
                  "end": {"line": end_line, "character": _utf16_len(a[end_line])}},
        "newText": new_text,
    }


def to_workspace_edit(
    proposal: Proposal,
    cell_uris: dict[int, str],
    cell_versions: dict[int, int] | None = None,
    cell_sources: dict[int, str] | None = None,
) -> dict:
    """The proposal as a JSON-ready LSP WorkspaceEdit: `documentChanges` of TextDocumentEdits on the cell URIs
    (exactly as the client sent them), each edit annotated with a ChangeAnnotation that needs confirmation.

    LSP cannot insert notebook cells, so an added cell is merged into the cell it follows (appended after a
    blank line; at the top: prepended to the first cell); `proposal.additions` stays available for clients
    that insert real cells. `cell_sources` (the client's current texts) default to the proposal's `old`."""
    versions = cell_versions or {}
    new_text: dict[int, str] = {e.cell: e.new for e in proposal.edits}
    old_text: dict[int, str] = {e.cell: e.old for e in proposal.edits}
    if cell_sources:
        old_text.update(cell_sources)
    merged: dict[int, list[int]] = {}
    for add in proposal.additions:
        host = add.after if add.after in cell_uris else min(cell_uris) if cell_uris else None
        if host is None:
            continue
        base = new_text.get(host, old_text.get(host, ""))
        if add.after == host:
            new_text[host] = base.rstrip("\n") + "\n\n" + add.source if base.strip() else add.source
        else:
            new_text[host] = add.source.rstrip("\n") + "\n\n" + base
        merged.setdefault(host, []).append(add.cell)
    changes = []
    annotations = {}
    for cell in sorted(new_text):
        uri = cell_uris.get(cell)
        if uri is None:
            continue
        old = old_text.get(cell, "")
        edit = minimal_text_edit(old, new_text[cell])
        if edit is None:
            continue
        ann_id = f"crane.fix.cell{cell}"
        label = f"CRANE fix: cell {cell}"
        if cell in merged:
            label += f" (with new cell{'s' if len(merged[cell]) > 1 else ''} appended)"
        annotations[ann_id] = {"label": label, "needsConfirmation": True,
                               "description": proposal.explanation[:300] or proposal.summary()}
        edit["annotationId"] = ann_id
        changes.append({"textDocument": {"uri": uri, "version": versions.get(cell)}, "edits": [edit]})
    return {"documentChanges": changes, "changeAnnotations": annotations}


# -- unified diff for the CLI ------------------------------------------------------------------------------------
def unified_diff(proposal: Proposal, path: str = "notebook.ipynb") -> str:
    out: list[str] = []
    for e in sorted(proposal.edits, key=lambda e: e.cell):
        out += difflib.unified_diff(e.old.splitlines(keepends=True), e.new.splitlines(keepends=True),
                                    fromfile=f"a/{path} (cell {e.cell})", tofile=f"b/{path} (cell {e.cell})")
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
    for a in proposal.additions:
        where = f"new cell after cell {a.after}" if a.after else "new cell at the top"
        out += difflib.unified_diff([], a.source.splitlines(keepends=True), fromfile="/dev/null",
                                    tofile=f"b/{path} ({where})")
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
    return "".join(out)

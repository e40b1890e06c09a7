"""Custom LSP payloads (msgspec Structs, camelCase on the wire), decoded and validated at the edge.

Documented in docs/protocol.md. Client → server params are decoded with `decode_params`, which accepts the
dict pygls hands over for unknown methods (or its namedtuple `Object`) and raises `InvalidParams` with a
message naming the bad field. Command arguments are positional as documented (an object with the same
camelCase names is accepted too) and read with `command_arg`; a command that cannot be served raises
`RequestFailed` (JSON-RPC -32803) with a message for the user.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from crane.agent.proposal import Proposal, ProposalStatus
from crane.errors import CraneError
from crane.finding import Finding, FindingSource
from crane.pipeline import FactsMode
from crane.sandbox.verdict import RunMode, SandboxVerdict

KernelState = Literal["attached", "busy", "idle", "dead", "static-only"]
# how the server found the kernel: named by the client (request), learned by the client through the Jupyter
# extension's kernels API (jupyter-extension), its own discovery (discovery), crane.kernel.connectionFile (setting)
KernelSource = Literal["request", "jupyter-extension", "discovery", "setting"]

# Client-side command the server puts into code actions (vscode-client protocol.ts ClientCommands): runs
# cells through the editor ("Run cell K first (tested)"); arguments [notebookUri, [cellUri, ...]].
CLIENT_RUN_CELLS = "crane.ui.runCells"


class InvalidParams(CraneError, ValueError):
    """Params of a custom message do not have the documented shape."""


class RequestFailed(JsonRpcException):
    """A request that cannot be served now (the cell is not open, no kernel, no model...): JSON-RPC -32803."""

    CODE = -32803
    MESSAGE = "Request failed"


def command_arg(args: tuple[Any, ...] | list[Any], index: int, name: str, command: str, required: bool = True) -> Any:
    """A string argument of a `workspace/executeCommand` call: positional `index`, or `name` of a single object
    argument. A missing required or mistyped one is an "invalid params" error naming it."""
    if len(args) == 1 and isinstance(args[0], dict):
        value = args[0].get(name)
    else:
        value = args[index] if index < len(args) else None
    if value is None and required:
        raise JsonRpcInvalidParams(f"{command}: missing argument {name!r} (argument {index + 1})")
    if value is not None and not isinstance(value, str):
        raise JsonRpcInvalidParams(f"{command}: {name!r} must be a string, got {type(value).__name__}")
    return value


class _Wire(msgspec.Struct, rename="camel", omit_defaults=False):
    pass


class KernelInfo(_Wire):
    connection_file: str | None  # a local kernel's connection file; null for a kernel on a Jupyter Server
    source: KernelSource  # how the kernel was found: (a) request / jupyter-extension, (b) discovery, (c) setting
    notebook_path: str | None = None  # the kernel's `__vsc_ipynb_file__`, when it has one
    pid: int | None = None  # as the kernel reports it (on the server's machine for a remote kernel)
    server_url: str | None = None  # a remote kernel: the Jupyter Server's base URL (never the token)
    kernel_id: str | None = None  # a remote kernel: its id on that server
    description: str = ""  # for users: the connection file, or "remote kernel (URL)"


class KernelStatus(_Wire):
    """`crane/kernelStatus` (server → client)."""

    notebook_uri: str | None
    state: KernelState
    kernel: KernelInfo | None = None
    message: str = ""
    stale: bool = False  # diagnostics currently rely on facts read before the kernel's last change
    sandbox: RunMode | None = None  # the speculative runs' mode, once one ran
    sandbox_reason: str | None = None  # why blocking (layered: file writes and workers in a private layer)


class AttachKernelParams(_Wire, forbid_unknown_fields=False, omit_defaults=True):
    """`crane/attachKernel` params and the `crane.attachKernel` command's arguments: a local kernel's
    `connectionFile`, or a kernel on a Jupyter Server, `kernelId` with `serverUrl` (default: the
    `crane.jupyterServer.url` setting; the token comes from the daemon's `JUPYTER_TOKEN`)."""

    notebook_uri: str
    connection_file: str | None = None
    server_url: str | None = None
    kernel_id: str | None = None
    source: Literal["request", "jupyter-extension"] = "request"  # how the client learned the kernel

    def __post_init__(self) -> None:
        if (self.connection_file is None) == (self.kernel_id is None):
            raise ValueError("give either connectionFile, or kernelId (with serverUrl)")
        if self.server_url is not None and self.kernel_id is None:
            raise ValueError("serverUrl goes with kernelId")


class AttachResult(_Wire):
    attached: bool
    message: str
    kernel: KernelInfo | None = None


class Usage(_Wire):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    model: str = ""


class SessionTotals(_Wire):
    """The LLM usage of this server process so far (crane.llm.cost.SESSION)."""

    requests: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_requests: int = 0


class DiagnosisResult(_Wire):
    """`crane.diagnoseCell` result, also sent as the `crane/diagnosis` notification."""

    notebook_uri: str
    cell_uri: str
    cell: int  # 1-based cell number in the notebook
    verdict: Finding | None  # the most likely crash, or None when no crash is predicted
    markdown: str
    findings: list[Finding] = []
    mode: FactsMode = "static"  # which kernel facts the diagnosis used
    source: Literal["rules", "llm"] = "rules"
    usage: Usage | None = None  # this answer's tokens and cost (llm)
    session: SessionTotals | None = None  # the session's totals after it (llm)
    cached: bool = False  # the model's answer came from the on-disk cache (not paid again)
    note: str | None = None  # why there is no LLM diagnosis although a model is configured


class CellCheck(_Wire):
    cell_uri: str
    cell: int
    findings: list[Finding] = []
    mode: FactsMode = "static"
    error: str | None = None


class CheckResult(_Wire):
    """`crane.checkNotebook` result."""

    notebook_uri: str
    cells: list[CellCheck]
    crashes: int  # number of cells predicted to crash
    cancelled: bool = False


class LmToolParams(_Wire, omit_defaults=True):
    """`crane/lmTool` params: one of CRANE's agent tools (`crane.mcp.tools`: `crane_kernel_facts`,
    `crane_check_code`, `crane_check_cell`, `crane_try_code`, `crane_fixes`) on the kernel attached to the open
    notebook `notebookUri` (its synced cells, unsaved edits included); `input`: the tool's arguments, as in its
    MCP input schema (snake_case)."""

    notebook_uri: str
    tool: str
    input: dict[str, Any] = {}


class LmToolResult(_Wire, omit_defaults=True):
    """`crane/lmTool` result: `text`, the tool's JSON result as MCP's `structuredContent` (snake_case), or, with
    `isError`, why the tool could not do its work (no kernel attached, the kernel died, a bad cell number)."""

    tool: str
    text: str
    is_error: bool = False


class SpeculativeResult(_Wire):
    """`crane.runSpeculatively` result: the cell run in a confined copy-on-write fork of the kernel (or a copy of
    its state), the sandbox's record of the run as it is, and the server's markdown of it."""

    cell_uri: str
    cell: int  # 1-based cell number in the notebook
    sandbox: SandboxVerdict  # crane.sandbox.verdict: the verdict, exception, line, output, how it was reached
    markdown: str = ""


class FixOptions(msgspec.Struct, rename="camel", forbid_unknown_fields=False, omit_defaults=True):
    """`crane.fixCell`'s optional second argument."""

    goal: str | None = None
    step_mode: bool | None = None


class FixResult(_Wire):
    """`crane.fixCell` result: the agent's proposal (crane.agent.proposal.Proposal) and the WorkspaceEdit
    applying it (change annotations needing confirmation), or null when it changes no code."""

    run_id: str
    status: ProposalStatus
    proposal: Proposal | None
    edit: Any  # an LSP WorkspaceEdit, or null
    markdown: str


class StopAgentResult(_Wire):
    stopped: bool


class ContinueAgentResult(_Wire):
    continued: bool


def decode_params(params: Any, typ: type) -> Any:
    """Convert request params (dict, pygls `Object` namedtuple, or a Struct) into `typ`."""
    if isinstance(params, typ):
        return params
    if hasattr(params, "_asdict"):  # pygls wraps params of unknown methods in namedtuples, recursively
        params = _plain(params)
    try:
        return msgspec.convert(params, typ)
    except msgspec.ValidationError as exc:
        raise InvalidParams(f"invalid params: {exc}") from None


def _plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def to_wire(value: msgspec.Struct) -> Any:
    """A Struct as JSON-ready builtins (for `protocol.notify` and command results)."""
    return msgspec.to_builtins(value)


class DiagnosticData(msgspec.Struct, rename="camel", omit_defaults=True):
    """A CRANE diagnostic's `data` (the client's code actions and hovers read it)."""

    ename: str
    rule: str
    root_cause: str | None
    confidence: float
    facts: FactsMode  # which kernel facts the check used
    source: FindingSource
    sandbox: SandboxVerdict | None = None  # the speculative run's record for the cell's current text, as it is
    fixes: int | None = None  # verified quick fixes found for the cell

"""The CRANE language server instance and the flat registration of every handler.

One feature per module (pygls's example servers): notebook sync (`sync.py`), hover (`hover.py`), code actions
(`code_actions.py`), the `workspace/executeCommand` commands (`commands.py`, `speculative_command.py`,
`agent_bridge.py`) and the `crane/attachKernel` request, lifecycle (`lifecycle.py`). The state and the
services behind them live in `crane_server.CraneServer`.
"""

from __future__ import annotations

from lsprotocol import types

from crane.lsp import agent_bridge, code_actions, commands, hover, lifecycle, lm_tools, speculative_command, sync
from crane.lsp.crane_server import CraneServer, LspLogHandler

__all__ = ["CraneServer", "LspLogHandler", "server"]

server = CraneServer()

server.feature(types.INITIALIZE)(lifecycle.initialize)
server.feature(types.INITIALIZED)(lifecycle.initialized)
server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(lifecycle.did_change_configuration)
server.feature(types.SHUTDOWN)(lifecycle.shutdown)
server.feature(types.EXIT)(lifecycle.exit)

server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)(sync.did_open)
server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)(sync.did_change)
server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)(sync.did_save)
server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)(sync.did_close)

server.feature(types.TEXT_DOCUMENT_HOVER)(hover.hover)
server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=code_actions.KINDS, resolve_provider=False),
)(code_actions.code_actions)

server.command(commands.CHECK_NOTEBOOK)(commands.check_notebook)
server.command(commands.DIAGNOSE_CELL)(commands.diagnose_cell)
server.command(commands.ATTACH_KERNEL)(commands.attach_kernel)
server.command(speculative_command.RUN_SPECULATIVELY)(speculative_command.run_speculatively)
server.command(agent_bridge.FIX_CELL)(agent_bridge.fix_cell)
server.command(agent_bridge.STOP_AGENT)(agent_bridge.stop_agent)
server.command(agent_bridge.CONTINUE_AGENT)(agent_bridge.continue_agent)
server.feature(commands.ATTACH_KERNEL_REQUEST)(commands.attach_kernel_request)
server.feature(lm_tools.LM_TOOL)(lm_tools.lm_tool)

"""`initialize`, `initialized`, `workspace/didChangeConfiguration`, `shutdown` and `exit`.

Settings come from `initializationOptions` and later configuration changes; invalid ones are shown to the
user (window/showMessage) and fall back to defaults. The analysis engine is imported in the background
after `initialized`, so `initialize` answers at once. The process leaves promptly after `exit` with or without
a `shutdown` before it (an editor that gives up on its server sends `exit` alone), and when its input ends (the
editor died): `leaving` ends every wait the process's end would wait for (litellm's import, the repair agent's runs).
Its exit code is the LSP's: 0 when a `shutdown` request came before, 1 otherwise (`exit` alone, or the input's end).
"""

from __future__ import annotations

import logging

from lsprotocol import types

from crane.llm.litellm_import import abandon, set_offline_cost_map
from crane.lsp import lm_tools
from crane.lsp.agent_runs import stop_all
from crane.lsp.crane_server import CraneServer

log = logging.getLogger(__name__)


def initialize(ls: CraneServer, params: types.InitializeParams) -> None:
    set_offline_cost_map()  # litellm (imported later) never fetches prices
    ls.apply_settings(params.initialization_options, initial=True)


async def initialized(ls: CraneServer, params: types.InitializedParams) -> None:
    ls.bind_loop()
    ls.spawn(ls.run_blocking(ls.analysis.warm_up))


async def did_change_configuration(ls: CraneServer, params: types.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if settings is None:  # pull model clients: ask for the section
        try:
            got = await ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="crane")])
            )
            settings = {"crane": got[0]} if got and got[0] is not None else None
        except Exception as exc:
            log.info("workspace/configuration failed: %s", exc)
            return
    before = ls.settings
    ls.apply_settings(settings)
    after = ls.settings
    if before.kernel != after.kernel:
        await ls.kernels.settings_changed()
    for session in ls.sessions.values():
        ls.kernels.recheck_all(session)


def leaving(ls: CraneServer) -> None:
    """The session is over: a model request still waiting for litellm's import ends now (the loop's end and the
    interpreter's wait for its thread), and so do the repair agent's runs. Idempotent, from any thread."""
    abandon()
    stop_all(ls.agent_runs)


async def shutdown(ls: CraneServer, params: None) -> None:
    ls.shutdown_requested = True  # received: the exit that follows is clean (code 0) even if what follows fails
    leaving(ls)
    ls.llm.close()
    ls.quick_fixes.close()
    lm_tools.close(ls)
    ls.speculation.close()
    await ls.kernels.shutdown()


def exit(ls: CraneServer, params: None) -> None:  # noqa: A001 - the LSP notification's name
    # pygls calls this first, then closes the channel and ends the loop (whose end waits for the executors' threads)
    leaving(ls)

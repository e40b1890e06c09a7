"""`initialize`, `initialized`, `workspace/didChangeConfiguration` and `shutdown`.

Settings come from `initializationOptions` and later configuration changes; invalid ones are shown to the
user (window/showMessage) and fall back to defaults. The analysis engine is imported in the background
after `initialized`, so `initialize` answers at once.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from crane.lsp.server import CraneServer

log = logging.getLogger(__name__)


def initialize(ls: CraneServer, params: types.InitializeParams) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm (imported later) never fetches prices
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


async def shutdown(ls: CraneServer, params: None) -> None:
    from crane.lsp import agent_bridge

    agent_bridge.stop_all(ls)
    ls.llm.close()
    ls.speculation.close()
    await ls.kernels.shutdown()

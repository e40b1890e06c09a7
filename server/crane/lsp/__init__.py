"""The CRANE language server (`crane serve`): live crash diagnostics on notebook cells.

One feature per module: `server.py` builds the server and registers the handlers; `sync.py` follows the
notebooks; `diagnostics.py` publishes per-cell squiggles; `analysis_service.py` runs analyse → probe →
predict off the event loop; `speculation.py` confirms or clears them with sandboxed speculative runs (auto
mode); `llm_bridge.py` plugs in the LLM layer (diagnoses, llm-mode diagnostics); `agent_bridge.py` runs the
repair agent; `kernel_attach.py`, `discovery.py` and `kernel_watch.py` reach and follow the kernel;
`hover.py`, `code_actions.py`, `commands.py`, `speculative_command.py` and `progress.py` are the user-facing
features; `settings.py` and `messages.py` are the typed edges. The wire contract is `docs/protocol.md`.
"""

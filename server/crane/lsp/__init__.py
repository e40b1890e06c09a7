"""The CRANE language server (`crane serve`): live crash diagnostics on notebook cells.

`server.py` registers the handlers (one feature per module: `sync`, `hover`, `code_actions`, `commands`,
`speculative_command`, `agent_bridge`, `lifecycle`) on `crane_server.CraneServer`, which owns the state and
the services; the services (`checks`, `diagnostics`, `scheduler`, `analysis_service`, `speculation`,
`llm_bridge`, `kernels`, `kernel_attach`, `kernel_watch`, `discovery`) see the server only through
`host.Host`. `settings.py` and `messages.py` are the typed edges (docs/protocol.md); see docs/architecture.md.
"""

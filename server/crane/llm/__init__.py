"""The LLM layer: runtime-augmented crash prediction and diagnosis on any model reachable through litellm.

Modules: settings (what model, where, limits), prompt / history / facts_text (prompt building), schema (the
model's answer and usage, validated at the edge), client (litellm calls, retries, repair), cost (prices and
the session's running total), cache (on-disk responses), predictor (what the CLI and the daemon call).

Importing this package never imports litellm: the client imports it lazily on the first request.
"""

"""The repair agent: fix a cell by editing, adding and executing cells in a sandbox (never the user's kernel),
and return a proposal the user reviews. Entry point: `crane.agent.loop.start_fix`; see docs/agent.md.

Importing this package imports neither litellm nor a kernel client.
"""

"""The configuration's leaves: each feature's config model, as pure data and its checks.

Each module here is one feature's section (``mcp``, ``schedules`` and their triggers, a
sandbox), a value the config holds (a chat target), or the narrow config a lower layer is
handed (the state's). They import nothing of Herald's features — only pydantic, the
standard library, :mod:`configbase` and the gateway's base modules — so
:mod:`gateway.settings` composes them, and every feature imports its own, without a circle.
"""

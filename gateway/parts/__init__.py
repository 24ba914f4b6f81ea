"""The parts every capability builds on, one module each: its typed key on the aiohttp app,
its accessor and its setup (an aiohttp ``cleanup_ctx`` generator that builds the part before
``yield`` and closes it after).

The state database and sessions, the cluster, the providers, the tools and agent turns, the
lanes, the outbox and the archive, the channels. Capabilities (sub-agents, schedules, the
chat runtime, MCP) own theirs in their own packages and build on these;
:mod:`gateway.resources` only orders the setups. Nothing here imports a capability.
"""

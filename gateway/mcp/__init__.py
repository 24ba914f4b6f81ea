"""MCP: tools from MCP servers for every agent, and Herald as an MCP server.

Modules, each imported by its own path (this package's ``__init__`` stays light because
:mod:`gateway.settings` composes :mod:`gateway.schema.mcp`, everything else here needs the
settings, and the SDK is imported only by a gateway that uses MCP):

- :mod:`~gateway.schema.mcp`: the ``mcp`` section of the configuration;
- :mod:`~gateway.mcp.results`: tool names and what the model reads of a result;
- :mod:`~gateway.mcp.transport`: one client session opened over stdio or HTTP with the SDK;
- :mod:`~gateway.mcp.stdio`: Herald's stdio transport (the server's process group, its lines);
- :mod:`~gateway.mcp.lines`: a server's output as lines, in linear time and bounded memory;
- :mod:`~gateway.mcp.connection`: one server's client session, restarted with backoff;
- :mod:`~gateway.mcp.manager`: every server, their tools in the registry, their state;
- :mod:`~gateway.mcp.tools`: an MCP server's tool as a Herald tool;
- :mod:`~gateway.mcp.probe`: connect once, list tools (``herald mcp probe``, doctor);
- :mod:`~gateway.mcp.setup`: the servers' life in the gateway's start and stop, the keys;
- :mod:`~gateway.mcp.serve`: Herald's own MCP endpoint (``mcp.serve``) and its tools;
- :mod:`~gateway.mcp.asgi`: the endpoint's aiohttp-to-ASGI handoff.
"""

from gateway.schema.mcp import McpConfig, McpServeConfig, McpServerConfig

__all__ = ["McpConfig", "McpServeConfig", "McpServerConfig"]

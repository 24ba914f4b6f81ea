"""CLI subcommands. Each module exposes ``add_commands(subparsers)``; see :mod:`gateway.cli`."""

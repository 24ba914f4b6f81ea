"""What the state database needs of the configuration, and nothing more.

The state layer opens, migrates and inspects the database from this narrow value, built by
:meth:`gateway.settings.HeraldSettings.state_config`, rather than from the whole settings:
the state sits below every feature whose section the settings compose, so it must not import
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from configbase import SecretUrl


@dataclass(frozen=True, slots=True)
class StateConfig:
    """Where the state lives: SQLite in ``state_dir``, or PostgreSQL at ``database_url``."""

    #: ``gateway.stateDir``, resolved (transcripts and the SQLite file live here).
    state_dir: Path
    #: ``cluster.databaseUrl``; None: SQLite, one process.
    database_url: SecretUrl | None
    #: This process's replica name (``cluster.replicaId``, or ``<hostname>-<pid>``).
    replica_id: str

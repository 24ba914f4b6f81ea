"""What a sandbox may see and use: the settings model shared by `exec`'s commands
(``agent.tools.exec.sandbox``) and stdio MCP servers (``mcp.servers.<name>.sandbox``).

In a module of its own, free of the rest of Herald, because :mod:`gateway.settings` and
:mod:`gateway.schema.mcp` both compose it; :mod:`gateway.tools.sandbox` builds the sandbox
from it.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, field_validator

from configbase import ConfigModel

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class SandboxLimits(ConfigModel):
    """The namespaces' one choice and the limits any sandboxed program runs under."""

    network: bool = False
    """Let the sandboxed program reach the network; false: its own network namespace,
    loopback only."""
    memory_mb: PositiveInt = 1024
    """Address space each of its processes may have, in MiB (`RLIMIT_AS`, per process); also
    what its private `/tmp` and `/dev/shm` (memory the host holds) may hold together:
    `/dev/shm` a quarter of it, up to 64 MiB, `/tmp` the rest."""
    max_processes: PositiveInt = 256
    """Processes and threads it may have at once (a pids cgroup where Herald may make one,
    else `RLIMIT_NPROC`; `herald doctor` says which)."""
    max_file_mb: PositiveInt = 1024
    """Size it may write a file to, in MiB (`RLIMIT_FSIZE`)."""
    read_only: list[str] = []
    """Extra host paths (absolute) it may read, at the same path."""

    @field_validator("read_only")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not os.path.isabs(path):
                raise ValueError(f"{path!r} is not an absolute path")
        return [os.path.normpath(path) for path in paths]


class SandboxConfig(SandboxLimits):
    """``agent.tools.exec.sandbox``: what an `exec` command may see and use."""

    mode: Literal["auto", "bwrap", "off"] = "auto"
    """`"bwrap"`: every command runs under bubblewrap (Debian's `bubblewrap`), seeing only
    its workspace, the system's programs and a private `/tmp`; `"auto"`: the same (allowing
    `exec` without bubblewrap installed is a config error); `"off"`: commands run as
    Herald's own user, seeing all it sees (the state database, the config, every
    workspace)."""
    cpu_seconds: PositiveInt = 120
    """CPU seconds a command's process may use (`RLIMIT_CPU`, per process)."""
    max_workspace_mb: NonNegativeInt = 2048
    """Disk space the agent's workspace may hold, in MiB: while it holds more, sandboxed
    commands are refused with an error saying so (measured before each command, counting
    allocated blocks, following no link; a workspace of more than 200,000 entries counts
    as over). 0: no limit."""

    @property
    def enabled(self) -> bool:
        """Whether commands run under bubblewrap (``auto`` and ``bwrap``)."""
        return self.mode != "off"

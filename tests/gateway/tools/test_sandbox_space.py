"""What a sandboxed command may fill, with the real bubblewrap: its memory-backed ``/tmp`` and
``/dev/shm`` hold at most ``memoryMb`` of the host's shared memory, and its workspace on
disk stops commands once it is over ``maxWorkspaceMb``.

The workspace lives under /var/tmp (as in test_sandbox): a command's own /tmp is private,
so a path under the host's /tmp would tell nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.llm import ToolCall
from gateway.schema.sandbox import SandboxConfig
from gateway.settings import ExecConfig, HeraldSettings
from gateway.tools import ToolContext, ToolOutput, ToolRegistry
from gateway.tools.exec import ExecTool

#: Guard against a hung wait; never an assertion about speed.
GUARD_SECONDS = 60
POLL_SECONDS = 0.02
MIB = 1024 * 1024


@pytest.fixture
def workspace() -> Iterator[Path]:
    """An agent's workspace on disk, outside /tmp, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="herald-space-test-", dir="/var/tmp"))
    try:
        (root / "ws").mkdir()
        yield root / "ws"
    finally:
        shutil.rmtree(root)


async def run(workspace: Path, sandbox: SandboxConfig, command: str) -> ToolOutput:
    registry = ToolRegistry()
    registry.register(ExecTool(ExecConfig(timeout_seconds=GUARD_SECONDS, sandbox=sandbox)))
    ctx = ToolContext(
        agent_id="main",
        session_key="agent:main:main",
        workspace=workspace,
        settings=HeraldSettings(),
    )
    return await registry.invoke(
        ToolCall("c", "exec", {"command": command}), ctx, frozenset({"exec"})
    )


def output(result: ToolOutput) -> str:
    assert result.data is not None, result.content
    text: str = result.data["output"]
    return text


async def appears(path: Path) -> None:
    """Waits until ``path`` exists (within the guard)."""
    for _ in range(int(GUARD_SECONDS / POLL_SECONDS)):
        if path.exists():
            return
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError(f"{path.name} did not appear")


def sandboxed_process(workspace: Path) -> int:
    """A process of the sandbox working in ``workspace``: in a mount namespace not ours."""
    ours = os.readlink("/proc/self/ns/mnt")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (
                os.readlink(entry / "cwd") == str(workspace)
                and os.readlink(entry / "ns" / "mnt") != ours
            ):
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no sandboxed process works in {workspace}")


def held(pid: int, place: str) -> tuple[int, int]:
    """(size, bytes in use) of the file system at ``place`` in the process's mount
    namespace, as the host's kernel accounts it."""
    found = os.statvfs(f"/proc/{pid}/root{place}")
    return found.f_blocks * found.f_frsize, (found.f_blocks - found.f_bfree) * found.f_frsize


#: Fills /tmp and /dev/shm with 20 files of 2 MiB each (40 MiB each), tries /dev itself,
#: then says so and holds its files until the test has looked.
FILL = (
    "for d in /tmp /dev/shm; do i=0; while [ $i -lt 20 ]; do "
    "head -c 2097152 /dev/zero > $d/f$i || break; i=$((i+1)); done; done; "
    "echo x > /dev/extra; touch filled; while [ ! -e go ]; do sleep 0.01; done"
)


async def fill(workspace: Path, memory_mb: int) -> tuple[str, dict[str, tuple[int, int]]]:
    """Runs :data:`FILL` under ``memoryMb``: its output, and what /tmp and /dev/shm held."""
    sandbox = SandboxConfig(mode="bwrap", memory_mb=memory_mb, max_file_mb=1024)
    task = asyncio.create_task(run(workspace, sandbox, FILL))
    try:
        await appears(workspace / "filled")
        pid = sandboxed_process(workspace)
        usage = {place: held(pid, place) for place in ("/tmp", "/dev/shm")}
    finally:
        (workspace / "go").touch()
        result = await task
    for name in ("filled", "go"):
        (workspace / name).unlink()
    return output(result), usage


async def test_tmp_and_dev_shm_hold_at_most_memory_mb(workspace: Path) -> None:
    # The control: with room, the command writes all 80 MiB, and the host holds them.
    text, usage = await fill(workspace, memory_mb=512)
    assert "No space left on device" not in text
    assert usage["/tmp"][1] >= 40 * MIB
    assert usage["/dev/shm"][1] >= 40 * MIB

    text, usage = await fill(workspace, memory_mb=32)
    assert text.count("No space left on device") == 2, text
    assert sum(size for size, _ in usage.values()) == 32 * MIB
    assert sum(used for _, used in usage.values()) <= 32 * MIB
    assert usage["/dev/shm"][0] == 8 * MIB  # a quarter of memoryMb, up to 64 MiB
    assert "cannot create /dev/extra: Read-only file system" in text


# -- the workspace's size ---------------------------------------------------------------------


async def test_a_workspace_over_its_limit_refuses_commands(workspace: Path) -> None:
    limited = SandboxConfig(mode="bwrap", max_workspace_mb=1)
    grow = await run(workspace, limited, "head -c 2097152 /dev/zero > big && echo wrote")
    assert output(grow) == "wrote\n"  # under the limit before it ran

    refused = await run(workspace, limited, "echo ran")
    assert refused.is_error
    assert refused.data is None  # never started
    assert "commands are refused: the workspace holds 2.1 MiB, over its limit of 1 MiB" in (
        refused.content
    )
    assert "maxWorkspaceMb" in refused.content
    assert str(workspace) not in refused.content  # no host path for the model

    unlimited = SandboxConfig(mode="bwrap", max_workspace_mb=0)  # the control: 0, no limit
    assert output(await run(workspace, unlimited, "echo ran")) == "ran\n"

    (workspace / "big").write_bytes(b"")  # emptied, as the write tool would
    assert output(await run(workspace, limited, "echo ran")) == "ran\n"


def test_the_workspace_limit_is_not_negative() -> None:
    with pytest.raises(ValidationError, match="maxWorkspaceMb"):
        HeraldSettings.model_validate(
            {"agent": {"tools": {"exec": {"sandbox": {"maxWorkspaceMb": -1}}}}}
        )

"""exec's sandbox, with the real bubblewrap: what a command cannot see, write or reach, and
the limits that end it; each beside a control where the same command does what it is
allowed to (the sandbox off, a wider limit, the network on).

The test process plays the gateway: its state directory holds the agent's workspace (the
default layout), the database and other agents' workspaces beside it. They live under
/var/tmp, not /tmp: a command's own /tmp is private and writable, so a path under the host's
/tmp would tell nothing about writes outside it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.llm import ToolCall
from gateway.schema.sandbox import SandboxConfig
from gateway.settings import ExecConfig, HeraldSettings
from gateway.tools import ToolContext, ToolOutput, ToolRegistry
from gateway.tools.exec import ExecTool
from gateway.tools.sandbox import bwrap_argv

#: Guard against a hung wait; never an assertion about speed.
GUARD_SECONDS = 30
POLL_SECONDS = 0.02
#: Where the test's host files live: on disk, outside /tmp.
HOST_SCRATCH = "/var/tmp"
ON = SandboxConfig(mode="bwrap")
OFF = SandboxConfig(mode="off")


@dataclass(frozen=True)
class Layout:
    state: Path
    workspace: Path
    database: Path
    other_workspace: Path
    config: Path
    settings: HeraldSettings


@pytest.fixture
def root() -> Iterator[Path]:
    """A fresh directory outside /tmp, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="herald-sandbox-test-", dir=HOST_SCRATCH))
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def layout(root: Path) -> Layout:
    tmp_path = root
    state = tmp_path / "state"
    workspace = state / "workspaces" / "main"
    other = state / "workspaces" / "other"
    for folder in (workspace, other):
        folder.mkdir(parents=True)
    database = state / "herald.db"
    database.write_text("DATABASE-CONTENT")
    (other / "notes.txt").write_text("OTHER-AGENTS-NOTES")
    config = tmp_path / "herald.json5"
    config.write_text("{ /* CONFIG-CONTENT */ }")
    settings = HeraldSettings.model_validate({"gateway": {"stateDir": str(state)}})
    return Layout(state, workspace, database, other / "notes.txt", config, settings)


async def run(
    layout: Layout, sandbox: SandboxConfig, command: str, seconds: float = 60
) -> ToolOutput:
    registry = ToolRegistry()
    registry.register(ExecTool(ExecConfig(timeout_seconds=seconds, sandbox=sandbox)))
    ctx = ToolContext(
        agent_id="main",
        session_key="agent:main:main",
        workspace=layout.workspace,
        settings=layout.settings,
    )
    call = ToolCall("c", "exec", {"command": command})
    return await registry.invoke(call, ctx, registry.names())


def output(result: ToolOutput) -> str:
    assert result.data is not None, result.content
    text: str = result.data["output"]
    return text


# -- what a command cannot read ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "needle"),
    [
        ("database", "DATABASE-CONTENT"),
        ("config", "CONFIG-CONTENT"),
        ("other_workspace", "OTHER-AGENTS-NOTES"),
    ],
)
async def test_herald_files_are_out_of_sight(layout: Layout, what: str, needle: str) -> None:
    command = f"cat {getattr(layout, what)}"
    allowed = await run(layout, OFF, command)
    assert needle in output(allowed)  # the control: without the sandbox, it reads it

    sandboxed = await run(layout, ON, command)
    assert sandboxed.is_error
    assert needle not in output(sandboxed)
    assert "No such file or directory" in output(sandboxed)


async def test_the_workspace_is_there_and_nothing_else_of_the_state_dir(layout: Layout) -> None:
    (layout.workspace / "mine.txt").write_text("MINE")
    result = await run(layout, ON, f"cat mine.txt; ls -A {layout.state}")
    assert not result.is_error, result.content
    assert output(result) == "MINEworkspaces\n"


async def test_home_is_out_of_sight(layout: Layout) -> None:
    home = Path.home()
    command = f"test -d {home} && echo HOME-VISIBLE"
    assert "HOME-VISIBLE" in output(await run(layout, OFF, command))
    assert "HOME-VISIBLE" not in output(await run(layout, ON, command))


async def test_the_gateways_proc_entry_is_out_of_sight(layout: Layout) -> None:
    # The test process plays the gateway; a fresh /proc of its own PID namespace has no
    # entry for it (the daemon-level test, in tests/security, reads for real secrets).
    pid = os.getpid()
    # How this process was started (pytest, or a pytest-xdist worker), as /proc shows it.
    program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    command = f"tr '\\0' ' ' < /proc/{pid}/cmdline; tr '\\0' '\\n' < /proc/{pid}/environ"
    allowed = output(await run(layout, OFF, command))
    assert program in allowed
    assert "PATH=" in allowed
    sandboxed = await run(layout, ON, command)
    assert sandboxed.is_error
    assert program not in output(sandboxed)
    assert "PATH=" not in output(sandboxed)


# -- what a command cannot write ---------------------------------------------------------------


async def test_writes_land_only_in_the_workspace(layout: Layout, root: Path) -> None:
    outside = root / "outside"
    outside.mkdir()
    command = f"echo in > inside.txt; echo out > {outside}/escaped.txt; echo st > {layout.database}"
    await run(layout, OFF, command)
    assert (outside / "escaped.txt").exists()  # the control
    assert layout.database.read_text() == "st\n"
    (outside / "escaped.txt").unlink()
    layout.database.write_text("DATABASE-CONTENT")
    (layout.workspace / "inside.txt").unlink()

    result = await run(layout, ON, command)
    assert output(result).count("cannot create") == 2, result.content
    assert (layout.workspace / "inside.txt").read_text() == "in\n"
    assert not (outside / "escaped.txt").exists()
    assert layout.database.read_text() == "DATABASE-CONTENT"


async def test_system_directories_are_read_only(layout: Layout) -> None:
    result = await run(layout, ON, "ls /usr/bin/env && touch /usr/herald-probe")
    assert result.is_error
    assert "/usr/bin/env" in output(result)  # readable
    assert "Read-only file system" in output(result)
    assert not Path("/usr/herald-probe").exists()


async def test_tmp_is_private(layout: Layout) -> None:
    host_file = Path("/tmp") / f"herald-host-{secrets.token_hex(8)}"
    host_file.write_text("HOST-TMP")
    try:
        command = f"cat {host_file}"
        assert output(await run(layout, OFF, command)) == "HOST-TMP"
        assert "HOST-TMP" not in output(await run(layout, ON, command))
    finally:
        host_file.unlink()
    # Usable within a call, gone for the next, never on the host.
    name = f"/tmp/herald-own-{secrets.token_hex(8)}"
    first = await run(layout, ON, f"echo OWN > {name} && cat {name}")
    assert output(first) == "OWN\n"
    second = await run(layout, ON, f"cat {name}")
    assert second.is_error
    assert not Path(name).exists()


# -- what a command cannot reach ---------------------------------------------------------------


@dataclass
class Listener:
    """A TCP server on the host's loopback: its port and what each connection sent."""

    port: int
    received: list[bytes]
    arrived: asyncio.Event


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.received.append(await reader.read(100))
        found.arrived.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    found = Listener(server.sockets[0].getsockname()[1], [], asyncio.Event())
    async with server:
        yield found


async def test_no_network_unless_allowed(layout: Layout, listener: Listener) -> None:
    port, received = listener.port, listener.received
    command = f"bash -c 'echo KNOCK > /dev/tcp/127.0.0.1/{port}'"
    blocked = await run(layout, ON, command)
    assert blocked.is_error
    assert "Connection refused" in output(blocked)  # its own loopback: nobody listens there
    assert received == []

    allowed = await run(layout, SandboxConfig(mode="bwrap", network=True), command)
    assert not allowed.is_error, allowed.content
    async with asyncio.timeout(GUARD_SECONDS):
        await listener.arrived.wait()
    assert received == [b"KNOCK\n"]


async def test_other_hosts_are_unreachable(layout: Layout) -> None:
    # TEST-NET-1: never routed. Without a network namespace the kernel has a route (or
    # says so); in the sandbox there is no interface but loopback.
    result = await run(layout, ON, "bash -c 'echo > /dev/tcp/192.0.2.1/80'")
    assert result.is_error
    assert "Network is unreachable" in output(result)


# -- limits -----------------------------------------------------------------------------------


def survivors(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def none_survive(marker: str) -> list[int]:
    """Waits until no process holds ``marker`` (within the guard); those left, if any."""
    for _ in range(int(GUARD_SECONDS / POLL_SECONDS)):
        if not (left := survivors(marker)):
            return left
        await asyncio.sleep(POLL_SECONDS)
    return survivors(marker)


def sleeper() -> str:
    """A ``sleep`` whose argument marks its processes (a unique duration)."""
    return f"sleep 3599.{secrets.randbelow(10**6):06d}"


#: Each case: the command (``{sleep}`` is a marked background sleep), the limits that stop
#: it, the limits under which the same command succeeds, and what the allowed run prints.
LIMITS: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {
    "memory": (
        "{sleep} & x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo ${{#x}}",
        {"memory_mb": 64},
        {"memory_mb": 1024},
        "100000000\n",
    ),
    "cpu": (
        "{sleep} & i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done; echo $i",
        {"cpu_seconds": 1},
        {"cpu_seconds": 120},
        "3000000\n",
    ),
    "processes": (
        "for i in $(seq 40); do {sleep} & done; echo started",
        {"max_processes": 10},
        {"max_processes": 256},
        "started\n",
    ),
    "file size": (
        "{sleep} & head -c 3000000 /dev/zero > big && wc -c < big",
        {"max_file_mb": 1},
        {"max_file_mb": 1024},
        "3000000\n",
    ),
}


@pytest.mark.parametrize("case", sorted(LIMITS))
async def test_a_limit_ends_the_command_and_leaves_nothing(layout: Layout, case: str) -> None:
    template, tight, wide, printed = LIMITS[case]
    sleep = sleeper()
    command = template.format(sleep=sleep)
    marker = sleep.split()[1]

    allowed = await run(layout, SandboxConfig(mode="bwrap", **wide), command)
    assert not allowed.is_error, allowed.content
    assert output(allowed) == printed
    assert await none_survive(marker) == []

    stopped = await run(layout, SandboxConfig(mode="bwrap", **tight), command)
    assert stopped.is_error, stopped.content
    assert output(stopped) != printed
    assert await none_survive(marker) == []


async def test_the_cpu_limit_is_named(layout: Layout) -> None:
    result = await run(layout, SandboxConfig(mode="bwrap", cpu_seconds=1), "while :; do :; done")
    assert "[stopped: the sandbox's CPU limit of 1s was reached]" in result.content


async def test_a_timeout_leaves_nothing(layout: Layout) -> None:
    sleep = sleeper()
    result = await run(layout, ON, f"{sleep} & {sleep}", seconds=0.5)
    assert result.data is not None
    assert result.data["timedOut"] is True
    assert await none_survive(sleep.split()[1]) == []


# -- the command line -------------------------------------------------------------------------


def test_read_only_paths_come_before_the_workspace(tmp_path: Path) -> None:
    # A readOnly path that holds the workspace must not cover it.
    config = SandboxConfig(mode="bwrap", read_only=[str(tmp_path)])
    argv = bwrap_argv(["true"], workdir=tmp_path / "ws", config=config)
    assert argv.index("--ro-bind", argv.index("--tmpfs")) < argv.index("--bind")
    command = argv[argv.index("--") + 1 :]
    assert argv[argv.index("--") - 2 : argv.index("--")] == ["--remount-ro", "/"]
    assert Path(command[0]).name == "prlimit"  # the limits, set inside the sandbox
    assert command[-2:] == ["--", "true"]


async def test_read_only_paths_are_readable_not_writable(layout: Layout, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("SHARED")
    command = f"cat {shared}/data.txt; echo x > {shared}/data.txt"
    hidden = await run(layout, ON, command)
    assert "SHARED" not in output(hidden)  # the control: not there unless listed
    listed = await run(layout, SandboxConfig(mode="bwrap", read_only=[str(shared)]), command)
    assert listed.is_error
    assert output(listed).startswith("SHARED")
    assert "Read-only file system" in output(listed)
    assert (shared / "data.txt").read_text() == "SHARED"


def run_as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run(
        [*drop, *argv], capture_output=True, text=True, timeout=GUARD_SECONDS, check=False
    )


def test_unprivileged_the_process_limit_counts_the_sandbox_alone(root: Path) -> None:
    """Not root, ``RLIMIT_NPROC`` holds (set inside the sandbox's user namespace, it counts
    the sandbox's processes, not every process of the user)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run as nobody (CI has both)")
    root.chmod(0o755)  # nobody's working directory
    tmp_path = root
    sleep = sleeper()
    marker = sleep.split()[1]
    # The user already has more processes than the limit, outside any sandbox.
    outside = [
        subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *sleep.split()]
        )
        for _ in range(12)
    ]
    try:
        command = ["/bin/sh", "-c", "for i in 1 2 3 4; do sleep 0.1 & done; wait; echo four"]
        limited = SandboxConfig(mode="bwrap", max_processes=10)
        fits = run_as_nobody(bwrap_argv(command, workdir=tmp_path, config=limited, as_root=False))
        assert fits.returncode == 0, fits.stderr
        assert fits.stdout == "four\n"
        many = ["/bin/sh", "-c", "for i in $(seq 20); do sleep 0.1 & done; wait; echo twenty"]
        refused = run_as_nobody(bwrap_argv(many, workdir=tmp_path, config=limited, as_root=False))
        assert refused.returncode != 0
        assert "fork" in refused.stderr.lower(), refused.stderr
        wide = SandboxConfig(mode="bwrap", max_processes=256)  # the control
        allowed = run_as_nobody(bwrap_argv(many, workdir=tmp_path, config=wide, as_root=False))
        assert allowed.stdout == "twenty\n", allowed.stderr
    finally:
        for process in outside:
            process.kill()
            process.wait()
    assert survivors(marker) == []

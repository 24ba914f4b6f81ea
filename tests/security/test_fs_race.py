"""The file tools against a sandboxed command that swaps a workspace folder with a symlink.

The attack of issue 35 (finding 1): a command in the real bubblewrap sandbox exchanges the
workspace folder ``d`` with a symlink ``link`` to a host folder, in a loop
(``renameat2(RENAME_EXCHANGE)``: both names always exist, one is the folder, the other the
symlink), while the agent's in-process ``read``/``write``/``edit``/``ls`` work on a path
through ``d``. A tool that checks the path and then opens it by name follows the symlink
whenever the swap lands between the two: it reads the host's file, writes beside it,
replaces it or lists its folder.

Each tool is attacked for :data:`RACE_SECONDS`. The test asserts what must never happen (host
content in an answer or in the workspace, a host file changed or added), not how many tries
fit in the time, so it does not depend on load. It cannot pass vacuously: some tries must
have seen the symlink (and been refused) and some the folder (and worked), so the swap did
race the tool.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.llm import ToolCall
from gateway.schema.sandbox import SandboxConfig
from gateway.settings import ExecConfig, HeraldSettings
from gateway.tools import ToolContext, ToolOutput, ToolRegistry
from gateway.tools.exec import ExecTool
from gateway.tools.fs import EditTool, LsTool, ReadTool, WriteTool

pytestmark = pytest.mark.slow

#: How long each tool is attacked (the issue asks for at least 20 s per tool).
RACE_SECONDS = 20.0
#: Guard against a hung attacker or tool; never an assertion about speed.
GUARD_SECONDS = RACE_SECONDS + 120
POLL_SECONDS = 0.02
#: Where the test's host files live: on disk, outside /tmp (a sandbox's /tmp is its own).
HOST_SCRATCH = "/var/tmp"
#: bubblewrap may still be installing when the suite starts (.ci/run installs it alongside).
BWRAP = Path("/usr/bin/bwrap")
BWRAP_WAIT_SECONDS = 600
SECRET = "HOST-SECRET x"
HOST_ONLY_ENTRY = "host-only-entry"
INSIDE = "INSIDE x"
#: The swap loop, run in the sandbox by the system's python3 (``/usr`` is bound read-only).
#: glibc's ``renameat2`` wrapper; the symlink points at the host folder by its host path.
ATTACK = """\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.symlink(sys.argv[1], "link")
open("attacking", "w").close()
swaps = 0
while True:
    if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"link", RENAME_EXCHANGE) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
    swaps += 1
    if swaps % 256 == 0 and os.path.exists("stop"):
        break
print("swaps", swaps)
"""


@dataclass(frozen=True)
class Scene:
    workspace: Path
    host: Path
    registry: ToolRegistry
    ctx: ToolContext


@dataclass
class Tally:
    """What the tries of one tool saw."""

    tries: int = 0
    #: Tries that worked on the workspace folder (the swap had it in place).
    inside: int = 0
    #: Tries refused because the path went through the symlink.
    refused: int = 0
    escapes: list[str] = field(default_factory=list)
    other: dict[str, int] = field(default_factory=dict)

    def note_other(self, content: str) -> None:
        self.other[content] = self.other.get(content, 0) + 1

    def summary(self) -> str:
        return (
            f"{len(self.escapes)} escapes in {self.tries} tries ({self.inside} inside, "
            f"{self.refused} refused); first escapes: {self.escapes[:5]}; other: {self.other}"
        )


@pytest.fixture
def scene() -> Iterator[Scene]:
    if not BWRAP.exists():
        _wait_for_bwrap()
    root = Path(tempfile.mkdtemp(prefix="herald-fsrace-", dir=HOST_SCRATCH))
    try:
        workspace = root / "state" / "workspaces" / "main"
        (workspace / "d").mkdir(parents=True, mode=0o700)
        (workspace / "d" / "f.txt").write_text(INSIDE)
        (workspace / "attack.py").write_text(ATTACK)
        host = root / "host"
        host.mkdir()
        (host / "f.txt").write_text(SECRET)
        (host / HOST_ONLY_ENTRY).write_text("")
        settings = HeraldSettings.model_validate({"gateway": {"stateDir": str(root / "state")}})
        registry = ToolRegistry()
        for tool in (ReadTool(), WriteTool(), EditTool(), LsTool()):
            registry.register(tool)
        sandbox = SandboxConfig(mode="bwrap", cpu_seconds=int(GUARD_SECONDS))
        registry.register(ExecTool(ExecConfig(timeout_seconds=GUARD_SECONDS, sandbox=sandbox)))
        ctx = ToolContext(
            agent_id="main", session_key="agent:main:main", workspace=workspace, settings=settings
        )
        yield Scene(workspace, host, registry, ctx)
    finally:
        shutil.rmtree(root)


def _wait_for_bwrap() -> None:
    deadline = time.monotonic() + BWRAP_WAIT_SECONDS
    while not BWRAP.exists():
        assert time.monotonic() < deadline, f"{BWRAP} did not appear (bubblewrap not installed)"
        time.sleep(1)


async def call(scene: Scene, name: str, **args: Any) -> ToolOutput:
    return await scene.registry.invoke(ToolCall("c", name, args), scene.ctx, scene.registry.names())


def host_changes(host: Path) -> list[str]:
    """What differs in the host folder from how the test made it (put back as it was, so
    that each escape is counted once)."""
    changes = []
    for name in sorted(os.listdir(host)):
        if name not in ("f.txt", HOST_ONLY_ENTRY):
            changes.append(f"a file {name!r} landed in the host folder")
            os.unlink(host / name)
    content = (host / "f.txt").read_text() if (host / "f.txt").exists() else None
    if content != SECRET:
        changes.append(f"the host's f.txt was replaced by {content!r}")
        (host / "f.txt").write_text(SECRET)
    return changes


def arguments(tool: str, n: int) -> dict[str, Any]:
    """The arguments of try ``n`` of ``tool``: always a path through ``d``."""
    if tool == "write":
        return {"path": "d/f.txt" if n % 2 else "d/new.txt", "content": f"{INSIDE} {n}"}
    if tool == "edit":  # x -> y, then y -> x: each works on the workspace's file in turn
        old, new = ("x", "y") if n % 2 else ("y", "x")
        return {"path": "d/f.txt", "oldText": old, "newText": new, "replaceAll": True}
    return {"path": "d" if tool == "ls" else "d/f.txt"}


def classify(tool: str, out: ToolOutput, tally: Tally) -> None:
    tally.tries += 1
    text = out.content
    if SECRET in text or HOST_ONLY_ENTRY in text:
        tally.escapes.append(f"{tool} answered with host content: {text[:120]!r}")
    elif out.is_error and ("symlink" in text or "outside the workspace" in text):
        tally.refused += 1
    elif not out.is_error or "was not found" in text:  # edit's toggle met the other letter
        tally.inside += 1
    else:
        tally.note_other(text)


def host_content_in_workspace(workspace: Path) -> list[str]:
    found = []
    for folder, _, files in os.walk(workspace):
        for name in files:
            path = Path(folder, name)
            if SECRET.split()[0] in path.read_text(errors="replace"):
                found.append(f"workspace file {path.relative_to(workspace)} holds host content")
    return found


@pytest.mark.parametrize("tool", ["read", "write", "edit", "ls"])
async def test_a_swapped_folder_never_lets_a_file_tool_out(scene: Scene, tool: str) -> None:
    loop = asyncio.get_running_loop()
    tally = Tally()
    async with asyncio.timeout(GUARD_SECONDS):
        attack = asyncio.create_task(
            call(scene, "exec", command=f"/usr/bin/python3 attack.py {scene.host}")
        )
        while not (scene.workspace / "attacking").exists():
            assert not attack.done(), (await attack).content
            await asyncio.sleep(POLL_SECONDS)
        try:
            deadline = loop.time() + RACE_SECONDS
            while loop.time() < deadline:
                out = await call(scene, tool, **arguments(tool, tally.tries))
                classify(tool, out, tally)
                tally.escapes += host_changes(scene.host)
        finally:
            (scene.workspace / "stop").write_text("")
            result = await attack
    assert not result.is_error, result.content
    assert "swaps" in result.content, result.content
    tally.escapes += host_content_in_workspace(scene.workspace)
    assert tally.escapes == [], tally.summary()
    # The race happened: the tool met the symlink and the folder alike.
    assert tally.refused > 0, tally.summary()
    assert tally.inside > 0, tally.summary()

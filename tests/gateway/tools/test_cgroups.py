"""The per-command pids cgroups: made with the limit, left by nothing, swept after a crash.

These need a place for pids cgroups (root with the v1 hierarchy, or a delegated v2 cgroup),
as CI has; elsewhere the sandbox uses RLIMIT_NPROC, which test_sandbox.py covers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from gateway.tools._cgroups import PidsCgroup, PidsParent, pids_parent


@pytest.fixture
def parent() -> PidsParent:
    found = pids_parent()
    if found is None:
        pytest.skip("no pids cgroup can be made here (not root, no delegated cgroup)")
    return found


async def test_a_cgroup_holds_its_limit_and_is_removed(parent: PidsParent) -> None:
    cgroup = PidsCgroup(parent, 7)
    assert (cgroup.path / "pids.max").read_text().strip() == "7"
    sleeper = await asyncio.create_subprocess_exec(*cgroup.argv(["sleep", "600"]))
    for _ in range(3000):  # the shell moves itself in, then becomes sleep (30 s at most)
        if cgroup.members() == [sleeper.pid] and _program(sleeper.pid) == "sleep":
            break
        await asyncio.sleep(0.01)
    assert cgroup.members() == [sleeper.pid]
    assert _program(sleeper.pid) == "sleep"
    await cgroup.close()  # kills what is left
    async with asyncio.timeout(30):
        assert await sleeper.wait() == -9
    assert not cgroup.path.exists()


async def test_a_command_that_cannot_enter_its_cgroup_does_not_run(
    parent: PidsParent, tmp_path: Path
) -> None:
    cgroup = PidsCgroup(parent, 7)
    cgroup.procs = str(tmp_path / "missing" / "cgroup.procs")
    marker = tmp_path / "ran"
    try:
        done = await asyncio.create_subprocess_exec(*cgroup.argv(["touch", str(marker)]))
        assert await done.wait() == 126
        assert not marker.exists()
    finally:
        await cgroup.close()


def _program(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def test_a_dead_gateways_cgroups_are_swept(parent: PidsParent) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = parent.path / f"herald-exec-{gone.pid}-1"
    live = parent.path / f"herald-exec-{os.getpid()}-999999"
    dead.mkdir()
    live.mkdir()
    try:
        assert pids_parent() == parent
        assert not dead.exists()
        assert live.exists()  # this process is alive: its cgroups are its own business
    finally:
        for path in (dead, live):
            if path.exists():
                path.rmdir()

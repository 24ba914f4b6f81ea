"""A pids cgroup per sandboxed command, where Herald may create one.

The kernel applies no ``RLIMIT_NPROC`` to root, so a process limit that holds for every user
needs the pids controller. Herald uses it where it may: cgroup v2 with the controller
delegated to Herald's own cgroup (``Delegate=yes`` in a unit), or the v1 ``pids`` hierarchy
when that is writable (root). Nothing here is required: without a place, :func:`pids_parent`
says so and the sandbox falls back to ``RLIMIT_NPROC``.

A command's cgroup is made before it starts, the command's first process moves itself in
(a shell writes ``0`` to ``cgroup.procs``, then execs the command: :meth:`PidsCgroup.argv`),
and :meth:`PidsCgroup.close` kills whatever is left and removes the directory. The move is
done by that shell rather than by a Python ``preexec_fn``: a function to run in the child
makes Python fork the whole gateway instead of starting the child the cheap way (vfork),
which cost ~12 ms a command against ~1 ms for the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

logger = logging.getLogger(__name__)

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
#: The leaf Herald moves itself into on cgroup v2, so that its own cgroup may enable the
#: pids controller for its children (v2 allows no process in a cgroup that does).
GATEWAY_LEAF: Final = "herald-gateway"
_PREFIX: Final = "herald-exec-"
_counter = itertools.count(1)
#: How long close waits for killed processes to leave: 2 s in 1 ms steps (they are usually
#: gone at the first try).
_CLOSE_TRIES: Final = 2000
_CLOSE_PAUSE: Final = 0.001
#: Moves the shell itself into the cgroup whose ``cgroup.procs`` is ``$0``, then becomes the
#: command: what the command starts is counted from its first process on. The command never
#: runs outside the cgroup (126: could not enter it; the shell's message names the file).
_ENTER_SCRIPT: Final = 'echo 0 >"$0" || exit 126; exec "$@"'
SHELL: Final = "/bin/sh"

Version = Literal["v1", "v2"]


@dataclass(frozen=True, slots=True)
class PidsParent:
    """Where command cgroups are made: a directory whose children get the pids controller."""

    path: Path
    version: Version

    def describe(self) -> str:
        return f"pids cgroup ({self.version}, under {self.path})"


def _own_cgroups() -> dict[str, str]:
    """``/proc/self/cgroup`` as controller list → path (``""`` is the v2 entry)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            out[controllers] = path
    return out


def _v2_mount() -> Path | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, _, after = line.partition(" - ")
            if after.split(" ", 1)[0] == "cgroup2":
                return Path(before.split()[4])
    return None


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _v2_parent(own: str) -> PidsParent | None:
    mount = _v2_mount()
    if mount is None:
        return None
    here = mount / own.lstrip("/")
    if here.name == GATEWAY_LEAF:  # moved there by an earlier call
        here = here.parent
    if not os.access(here, os.W_OK):
        return None
    if "pids" in _words(here / "cgroup.subtree_control"):
        return PidsParent(here, "v2")
    if "pids" not in _words(here / "cgroup.controllers"):
        return None
    # Delegated to us alone (a unit with Delegate=yes): move into a leaf, then enable the
    # controller for the children. Never move processes that are not ours.
    if _words(here / "cgroup.procs") - {str(os.getpid())}:
        return None
    try:
        leaf = here / GATEWAY_LEAF
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text("0")
        (here / "cgroup.subtree_control").write_text("+pids")
    except OSError as exc:
        logger.info("cannot use the delegated cgroup %s for process limits: %s", here, exc)
        return None
    return PidsParent(here, "v2")


def _v1_parent(own: dict[str, str]) -> PidsParent | None:
    path = next((p for c, p in own.items() if "pids" in c.split(",")), None)
    if path is None:
        return None
    here = CGROUP_ROOT / "pids" / path.lstrip("/")
    if os.access(here, os.W_OK) and (here / "cgroup.procs").exists():
        return PidsParent(here, "v1")
    return None


def pids_parent() -> PidsParent | None:
    """Where this process may make pids cgroups for its commands, or None. Cgroups left
    there by a gateway that was killed are removed on the way."""
    own = _own_cgroups()
    found = _v2_parent(own[""]) if "" in own else None
    found = found or _v1_parent(own)
    if found is not None:
        _sweep(found.path)
    return found


def _sweep(parent: Path) -> None:
    """Remove ``herald-exec-<pid>-<n>`` cgroups whose gateway process is gone (a killed
    gateway's commands died with it: bubblewrap's --die-with-parent)."""
    for child in parent.glob(f"{_PREFIX}*-*"):
        owner = child.name.removeprefix(_PREFIX).split("-", 1)[0]
        if not owner.isdigit() or _alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            child.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PidsCgroup:
    """One command's pids cgroup: made with its limit, entered by the command, then closed."""

    def __init__(self, parent: PidsParent, max_processes: int) -> None:
        self.path = parent.path / f"{_PREFIX}{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            (self.path / "pids.max").write_text(str(max_processes))
        except OSError:
            self.path.rmdir()
            raise
        self.procs = str(self.path / "cgroup.procs")

    def __repr__(self) -> str:
        return f"<PidsCgroup {self.path}>"

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` started inside this cgroup (the path is Herald's own, never a user's)."""
        return [SHELL, "-c", _ENTER_SCRIPT, self.procs, *command]

    def members(self) -> list[int]:
        try:
            return [int(pid) for pid in Path(self.procs).read_text().split()]
        except (OSError, ValueError):
            return []

    async def close(self) -> None:
        """Kill what is left in the cgroup and remove it (best effort, logged)."""
        for _ in range(_CLOSE_TRIES):
            for pid in self.members():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                # Killed processes leave the cgroup when they are reaped; an exiting pid
                # namespace reaps them by itself, a moment later.
                await asyncio.sleep(_CLOSE_PAUSE)
        logger.warning("could not remove %s: processes are still leaving it", self.path)

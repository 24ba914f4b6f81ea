"""The sandbox a command runs in: bubblewrap's namespaces and mounts, and the limits.

:func:`bwrap_argv` builds the bubblewrap command line for any program started on an agent's
behalf: ``exec``'s commands and sandboxed stdio MCP servers. The sandbox sees only:
the system's programs and libraries (``/usr``, ``/bin``, ``/lib*``) and the few ``/etc``
files programs need, read-only; the ``readOnly`` paths, read-only; the working directory
(when there is one), read-write; a fresh ``/tmp``, a minimal read-only ``/dev`` with a fresh
``/dev/shm``, and its own read-only ``/proc``. It gets
new mount, PID, IPC, UTS and (unless ``network``) network namespaces, a new session (no
terminal to inject input into), and dies with its parent.

The resource limits are set by util-linux's ``prlimit``, the first program in the sandbox,
which then execs the command: they hold for the command and everything it starts. Set
there, after bubblewrap made its user namespace (when Herald is not root), ``RLIMIT_NPROC``
counts the sandbox's processes only, not every process of Herald's user. The kernel
ignores ``RLIMIT_NPROC`` for root, so the process limit also uses a pids cgroup where Herald
may make one (:mod:`gateway.tools._cgroups`, :class:`Limits`); :func:`process_limit` says
which holds.

``/tmp`` and ``/dev/shm`` are the sandbox's only memory-backed places it may write (its root
and ``/dev``, tmpfs too, are read-only). A tmpfs is shared memory the host holds, which no
rlimit bounds, so each gets a size (:func:`tmpfs_sizes`): together they hold at most
``memoryMb``.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.schema.sandbox import SandboxConfig, SandboxLimits
from gateway.tools._cgroups import PidsCgroup, PidsParent, pids_parent

logger = logging.getLogger(__name__)

BWRAP: Final = "bwrap"
#: util-linux's prlimit (Debian: essential), run in the sandbox to set the limits.
PRLIMIT: Final = "prlimit"
#: The Debian package that installs ``bwrap``: what an error tells people to install.
BWRAP_PACKAGE: Final = "bubblewrap"
MIB: Final = 1024 * 1024
#: Top-level system directories, bound read-only (or recreated as the symlinks they are on a
#: merged-/usr system).
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What programs read in /etc: the dynamic linker, users and groups by id, name resolution,
#: certificates, time zone. No secrets live in these (``/etc/shadow`` is not one of them).
ETC_FILES: Final = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/gai.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/passwd",
    "/etc/protocols",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl",
    "/etc/timezone",
)
#: The largest share of ``memoryMb`` that goes to ``/dev/shm`` (POSIX shared memory and
#: semaphores); ``/tmp`` gets the rest. 64 MiB is Docker's default ``/dev/shm``.
SHM_MAX_BYTES: Final = 64 * MIB
#: ``/dev/shm``'s share of a smaller ``memoryMb``: a quarter.
SHM_SHARE: Final = 4
#: Where a command's HOME and TMPDIR point: its private /tmp (the host's home is not there).
SANDBOX_HOME: Final = "/tmp"
#: What to do when bubblewrap cannot make a sandbox (the usual causes, in order).
SANDBOX_FIX: Final = (
    "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
    "user.max_user_namespaces > 0); under systemd, add systemd/exec-sandbox.conf as a "
    "drop-in of the unit (docs/sandbox.md)"
)
#: Guard on the start-up probe (it takes milliseconds; a wedged bwrap must not hang start).
PROBE_SECONDS: Final = 30


def find_bwrap() -> str | None:
    """The ``bwrap`` executable on PATH, or None."""
    return shutil.which(BWRAP)


def bwrap_argv(
    argv: Sequence[str],
    *,
    workdir: Path | None,
    config: SandboxLimits,
    cpu_seconds: int | None = None,
    bwrap: str = BWRAP,
    as_root: bool | None = None,
) -> list[str]:
    """The command line that runs ``argv`` under bubblewrap in ``workdir`` (bound read-write
    at its own path and made the working directory; None: the private ``/tmp`` is), within
    ``config``'s limits and, when given, ``cpu_seconds`` of CPU per process.

    ``as_root`` (default: whether this process is root) drops every capability in the
    sandbox: bubblewrap keeps root's otherwise. The environment is the caller's to give; a
    pids cgroup, where one is wanted, is :class:`Limits`'s.
    """
    root = os.geteuid() == 0 if as_root is None else as_root
    args = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if not config.network:
        args.append("--unshare-net")
    args += ["--die-with-parent", "--new-session"]
    if root:
        args += ["--cap-drop", "ALL"]
    for path in SYSTEM_DIRS:
        args += _system_dir(path)
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    # /proc is read-only: a root command could otherwise write the sysctls and
    # /proc/sysrq-trigger of the host (they do not check capabilities, only the owner).
    args += ["--proc", "/proc", "--remount-ro", "/proc"]
    # /dev is a tmpfs of bubblewrap's with no size: read-only, with a sized /dev/shm over its
    # shm folder (the device nodes are mounts of their own and stay writable).
    tmp_bytes, shm_bytes = tmpfs_sizes(config)
    args += ["--dev", "/dev", "--remount-ro", "/dev", "--size", str(shm_bytes), "--tmpfs"]
    args += ["/dev/shm", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    for path in config.read_only:
        args += ["--ro-bind", path, path]
    # Last, so that a readOnly path holding the workspace does not cover it.
    if workdir is None:
        args += ["--chdir", SANDBOX_HOME]
    else:
        place = str(workdir)
        args += ["--bind", place, place, "--chdir", place]
    # The sandbox's own root (where bubblewrap made the mount points) is read-only too: a
    # write outside the workspace and /tmp fails rather than landing in memory.
    args += ["--remount-ro", "/", "--", *limit_argv(config, cpu_seconds), *argv]
    return args


def tmpfs_sizes(config: SandboxLimits) -> tuple[int, int]:
    """The sizes, in bytes, of the sandbox's ``/tmp`` and ``/dev/shm``: ``memoryMb`` between
    them, ``/dev/shm`` a quarter of it up to :data:`SHM_MAX_BYTES`. Both are above zero
    (a tmpfs of size 0 would have no limit at all)."""
    total = config.memory_mb * MIB
    shm = min(SHM_MAX_BYTES, total // SHM_SHARE)
    return total - shm, shm


def limit_argv(config: SandboxLimits, cpu_seconds: int | None = None) -> list[str]:
    """``prlimit`` with ``config``'s limits (and ``cpu_seconds``, when given), ready to run
    a command (``--`` last).

    No limit asks for more than this process's hard limit, which an unprivileged process
    may not raise. SIGXCPU comes at the CPU limit, SIGKILL a second later; no core dumps.
    """
    prlimit = shutil.which(PRLIMIT) or f"/usr/bin/{PRLIMIT}"
    args = [
        prlimit,
        f"--as={_capped(resource.RLIMIT_AS, config.memory_mb * MIB)}",
        f"--fsize={_capped(resource.RLIMIT_FSIZE, config.max_file_mb * MIB)}",
        "--core=0",
        f"--nproc={_capped(resource.RLIMIT_NPROC, config.max_processes)}",
    ]
    if cpu_seconds is not None:
        cpu = _capped(resource.RLIMIT_CPU, cpu_seconds)
        args.append(f"--cpu={cpu}:{_capped(resource.RLIMIT_CPU, cpu_seconds + 1)}")
    return [*args, "--"]


def _capped(which: int, limit: int) -> int:
    hard = resource.getrlimit(which)[1]
    return limit if hard == resource.RLIM_INFINITY else min(limit, hard)


def _system_dir(path: str) -> list[str]:
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if os.path.isdir(path):
        return ["--ro-bind", path, path]
    return []


def sandbox_environment(environ: dict[str, str], workdir: Path | None) -> dict[str, str]:
    """``environ`` (already scrubbed) for a sandboxed command: HOME and TMPDIR in its
    private /tmp, PWD its working directory (that /tmp without one)."""
    place = SANDBOX_HOME if workdir is None else str(workdir)
    return environ | {"HOME": SANDBOX_HOME, "TMPDIR": SANDBOX_HOME, "PWD": place}


@functools.cache
def _pids_parent() -> PidsParent | None:
    # Once per process: the v2 set-up moves the gateway into a leaf cgroup.
    return pids_parent()


def process_limit() -> str:
    """What holds ``maxProcesses`` here: a pids cgroup, ``RLIMIT_NPROC``, or nothing."""
    parent = _pids_parent()
    if parent is not None:
        return parent.describe()
    if os.geteuid() != 0:
        return "RLIMIT_NPROC (in the sandbox's user namespace: its own processes)"
    return "nothing: root ignores RLIMIT_NPROC and no pids cgroup can be made here"


@dataclass(slots=True)
class Limits:
    """One command's pids cgroup, where there is a place for one: made by :meth:`open`,
    entered by the command's first process (:meth:`wrap`), removed by :meth:`close`.
    The other limits are :func:`limit_argv`'s."""

    cgroup: PidsCgroup | None = None

    @classmethod
    def open(cls, config: SandboxLimits) -> Limits:
        """The cgroup of one command, when there is a place for it (a mkdir: never slow)."""
        parent = _pids_parent()
        if parent is None:
            return cls()
        try:
            return cls(PidsCgroup(parent, config.max_processes))
        except OSError as exc:
            logger.warning("exec: cannot make a pids cgroup under %s: %s", parent.path, exc)
            return cls()

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup (unchanged without one)."""
        return argv if self.cgroup is None else self.cgroup.argv(argv)

    async def close(self) -> None:
        if self.cgroup is not None:
            await self.cgroup.close()


def limit_note(code: int | None, config: SandboxConfig) -> str | None:
    """What ended a sandboxed command whose exit status is ``code``, when a limit did.

    bubblewrap's init reports a command killed by a signal as 128 + the signal number.
    """
    if code == 128 + signal.SIGXCPU:
        return f"[stopped: the sandbox's CPU limit of {config.cpu_seconds}s was reached]"
    if code == 128 + signal.SIGXFSZ:
        return f"[stopped: a file reached the sandbox's limit of {config.max_file_mb} MiB]"
    return None


def probe(config: SandboxLimits) -> str | None:
    """Start ``true`` in the sandbox ``config`` describes, in a scratch directory: None if
    it ran, else why not (bubblewrap's own words). Blocks for the few milliseconds it takes.
    """
    bwrap = find_bwrap()
    if bwrap is None:
        return f"bwrap is not installed (Debian package {BWRAP_PACKAGE})"
    with tempfile.TemporaryDirectory(prefix="herald-probe-") as scratch:
        argv = bwrap_argv(["true"], workdir=Path(scratch), config=config, bwrap=bwrap)
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_SECONDS
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
    if done.returncode == 0:
        return None
    text = (done.stderr or done.stdout).decode("utf-8", errors="replace").strip()
    return text or f"exit status {done.returncode}"

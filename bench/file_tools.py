"""Issue 35, item 1: what opening a workspace path without following symlinks costs.

Run with ``python -m bench.file_tools``. The file tools used to resolve a path by name
(``realpath``, then a check that it lies in the workspace) and open the resolved name; that
is the baseline, kept here as :func:`baseline_read` and :func:`baseline_write` (it races a
sandboxed command that swaps a folder for a symlink, so the product no longer has it). Herald
opens the workspace and walks the path below its descriptor, with ``openat2`` where the
kernel has it and one ``openat(O_NOFOLLOW)`` per component where not (rows for both).

Each call does what ``read`` and ``write`` do around the path: read a small file whole; write
one atomically (temporary file, fsync, rename, fsync of the folder). Figures are CPU
microseconds per call (this process's user + system time), the best of alternating rounds.
Goal: Herald within 1.3× the baseline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench._common import Row, format_table, row
from gateway.tools import _beneath
from gateway.tools._paths import atomic_write, ensure_workspace, folder, locate, open_regular

READS = 20_000
WRITES = 2_000
ROUNDS = 3
RATIO_GOAL = 1.3
#: A path three folders deep, as an agent's notes often are.
PATH = "notes/2025/06/day.md"
CONTENT = b"# a day\n" + b"- something done\n" * 60
#: Sizes for ``python -m bench --quick``.
QUICK: dict[str, Any] = {"reads": 500, "writes": 100, "rounds": 1}


# -- the baseline: resolve by name, then open the resolved name ------------------------------


def _baseline_resolve(workspace: Path, raw: str) -> Path:
    root = ensure_workspace(workspace)
    real = Path(os.path.realpath(root / raw))
    if real != root and root not in real.parents:
        raise SystemExit(f"bench.file_tools: {raw!r} resolved outside the workspace")
    return real


def baseline_read(workspace: Path, raw: str) -> bytes:
    real = _baseline_resolve(workspace, raw)
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        os.fstat(f.fileno())
        return f.read()


def baseline_write(workspace: Path, raw: str, data: bytes) -> None:
    real = _baseline_resolve(workspace, raw)
    real.parent.mkdir(parents=True, exist_ok=True)
    mode = real.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fchmod(f.fileno(), mode)
        os.fsync(f.fileno())
    os.replace(tmp, real)
    dir_fd = os.open(real.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# -- Herald: the product's helpers, as read and write use them ------------------------------


def herald_read(workspace: Path, raw: str) -> bytes:
    fd = open_regular(locate(workspace, raw))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def herald_write(workspace: Path, raw: str, data: bytes) -> None:
    path = locate(workspace, raw)
    with folder(path.root, path.parent, create=True) as dir_fd:
        atomic_write(dir_fd, path.name, data, path.shown)


# -- measuring ------------------------------------------------------------------------------


@contextlib.contextmanager
def _walk_only() -> Iterator[None]:
    """Herald as on a kernel without openat2 (the per-component walk)."""
    saved = _beneath._openat2
    _beneath._openat2 = None
    try:
        yield
    finally:
        _beneath._openat2 = saved


def _cpu_per_call(calls: int, once: Callable[[], object]) -> float:
    start = time.process_time()
    for _ in range(calls):
        once()
    return (time.process_time() - start) / calls


def _best(rounds: int, sides: dict[str, tuple[int, Callable[[], object]]]) -> dict[str, float]:
    """Each side's best round, in microseconds per call; sides alternate within a round."""
    best = dict.fromkeys(sides, float("inf"))
    for _ in range(rounds):
        for name, (calls, once) in sides.items():
            if name.endswith("walk"):
                with _walk_only():
                    best[name] = min(best[name], _cpu_per_call(calls, once))
            else:
                best[name] = min(best[name], _cpu_per_call(calls, once))
    return {name: seconds * 1e6 for name, seconds in best.items()}


def measure(reads: int, writes: int, rounds: int, workspace: Path) -> list[Row]:
    herald_write(workspace, PATH, CONTENT)
    if herald_read(workspace, PATH) != CONTENT or baseline_read(workspace, PATH) != CONTENT:
        raise SystemExit("bench.file_tools: the two sides read different bytes")
    sides: dict[str, tuple[int, Callable[[], object]]] = {
        "read baseline": (reads, lambda: baseline_read(workspace, PATH)),
        "read openat2": (reads, lambda: herald_read(workspace, PATH)),
        "read walk": (reads, lambda: herald_read(workspace, PATH)),
        "write baseline": (writes, lambda: baseline_write(workspace, PATH, CONTENT)),
        "write openat2": (writes, lambda: herald_write(workspace, PATH, CONTENT)),
        "write walk": (writes, lambda: herald_write(workspace, PATH, CONTENT)),
    }
    if not _beneath.openat2_in_use():  # this kernel: the walk is what Herald does
        sides = {name: side for name, side in sides.items() if "openat2" not in name}
    us = _best(rounds, sides)
    goal = f"ratio <= {RATIO_GOAL}"
    depth = PATH.count("/") + 1
    return [
        row(
            f"{tool} CPU µs per call, {depth}-deep path: {way} vs realpath+open",
            us[f"{tool} {way}"],
            us[f"{tool} baseline"],
            goal,
            digits=2,
        )
        for tool in ("read", "write")
        for way in ("openat2", "walk")
        if f"{tool} {way}" in us
    ]


def run(reads: int = READS, writes: int = WRITES, rounds: int = ROUNDS) -> list[Row]:
    """Rows for ``python -m bench``."""
    scratch = Path(tempfile.mkdtemp(prefix="herald-bench-fs-"))
    try:
        return measure(reads, writes, rounds, scratch / "workspace")
    finally:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    quick = "--quick" in sys.argv[1:]
    print(format_table(run(**QUICK) if quick else run()))

"""``exec`` of ``true`` under bubblewrap against the same call with the sandbox off: wall time
and CPU per call.

Run with ``python -m bench.sandbox``. Both sides call the real ``ExecTool`` (scrubbed
environment, process group, output capture) in the same process, in alternating rounds;
each figure is the best round's mean, so one noisy round does not decide it. CPU counts this
process and every child it reaped (bubblewrap, its init, the shell), from ``getrusage``.
The sandboxed side also makes and removes a pids cgroup per call where it can (root, or a
delegated cgroup), as the gateway does. Goal (issue #28): at most 20 ms added per call.
"""

from __future__ import annotations

import asyncio
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import format_table, row
from gateway.schema.sandbox import SandboxConfig
from gateway.settings import ExecConfig, HeraldSettings
from gateway.tools.base import ToolContext
from gateway.tools.exec import ExecParams, ExecTool

CALLS = 200
ROUNDS = 3
ADDED_MS_GOAL = 20
#: Sizes for ``python -m bench --quick``.
QUICK: dict[str, Any] = {"calls": 20, "rounds": 1}


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def _round(tool: ExecTool, ctx: ToolContext, calls: int) -> tuple[float, float]:
    """Mean wall and CPU seconds per call of ``true``."""
    params = ExecParams(command="true")
    cpu, start = _cpu_seconds(), time.perf_counter()
    for _ in range(calls):
        out = await tool.run(params, ctx)
        if out.is_error:
            raise SystemExit(f"bench.sandbox: exec of true failed: {out.content}")
    return (time.perf_counter() - start) / calls, (_cpu_seconds() - cpu) / calls


async def _measure(calls: int, rounds: int, workspace: Path) -> list[dict[str, Any]]:
    settings = HeraldSettings()
    ctx = ToolContext("main", "agent:main:main", workspace, settings)
    sandboxed = ExecTool(ExecConfig(sandbox=SandboxConfig(mode="bwrap")))
    plain = ExecTool(ExecConfig(sandbox=SandboxConfig(mode="off")))
    best: dict[str, tuple[float, float]] = {}
    await _round(sandboxed, ctx, 1)  # warm: the cgroup set-up, bwrap in the page cache
    await _round(plain, ctx, 1)
    for _ in range(rounds):
        for name, tool in (("bwrap", sandboxed), ("off", plain)):
            wall, cpu = await _round(tool, ctx, calls)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    (s_wall, s_cpu), (p_wall, p_cpu) = best["bwrap"], best["off"]
    goal = f"<= {ADDED_MS_GOAL} ms added"
    added = f"(+{(s_wall - p_wall) * 1000:.1f} ms, +{(s_cpu - p_cpu) * 1000:.1f} ms CPU)"
    return [
        row(f"exec true: ms per call, bwrap vs off {added}", s_wall * 1000, p_wall * 1000, goal),
        row("exec true: CPU ms per call, bwrap vs off", s_cpu * 1000, p_cpu * 1000, goal),
    ]


def run(calls: int = CALLS, *, rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """The two rows; needs ``bwrap`` on PATH."""
    if shutil.which("bwrap") is None:
        raise SystemExit("bench.sandbox: bwrap is not installed (apt-get install bubblewrap)")
    with tempfile.TemporaryDirectory(prefix="herald-bench-sandbox-") as scratch:
        return asyncio.run(_measure(calls, rounds, Path(scratch)))


def main() -> None:
    print(format_table(run()))


if __name__ == "__main__":
    main()

"""Gateway overhead per agent turn (issue 4), against a bare aiohttp client loop.

Run with ``python -m bench.turns``. Herald's side is the production path of a chat message:
an :class:`InboundMessage` handed to the in-memory channel's handler
(``ChatRuntime.handle_inbound``: routing, session creation, the session and ``main``
lanes), then ``run_turn`` on the real ``openai-completions`` provider pointed at a
zero-latency fake, with the real tool registry, the transcript writer and the state
database written as in production, and the reply sent back to the channel. Each run is
four model calls: three answered with one tool call, then a final text. The goal's pass
calls ``agents_list`` (the tool plumbing without tool work of its own); a second pass calls
``ls`` in the agent's workspace, for information, since a directory listing on a worker
thread is the tool's work rather than the gateway's. Chats hold ``turns_per_chat``
consecutive turns, so later turns carry their conversation's history, as they do in use.

The baseline makes the same HTTP calls to the same fake with a bare ``aiohttp``
``ClientSession``: the very request bodies Herald sent in the round before (recorded by
the fake), encoded and the answers decoded, one call at a time.

The figure is process CPU time (``time.process_time``: every thread, so the database
writer, the transcript writer and the tool's worker thread count for Herald). The fake
server runs in this process too, so its CPU is inside both figures equally; the ratio
therefore understates Herald's own overhead a little. Gateway log lines are below the
default log level here, so logging costs nothing on either side. Each side is the best of
``rounds`` alternating rounds. Goal: Herald ≤ 1.5× the baseline.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import (
    TOOL_ARGUMENTS,
    CountingChannel,
    FakeOpenAI,
    Gateway,
    Row,
    bench_settings,
    fake_openai,
    format_table,
    replay,
    row,
    running_services,
)
from gateway.tools import tools_for_agent

RUNS = 1000
TOOL_ROUNDS = 3
#: The goal measures the gateway's own overhead, so the tool rounds call a tool whose own
#: work is negligible (``agents_list``: validation, policy, transcript lines, no I/O); a
#: second pass with ``ls`` reports the cost including a filesystem tool's thread and stats.
TOOL = "agents_list"
FS_TOOL = "ls"
TURNS_PER_CHAT = 10
ROUNDS = 2
WARMUP_RUNS = 20
RATIO_GOAL = 1.5
QUICK: dict[str, Any] = {"runs": 40, "rounds": 1}
TEXT = "Please look at what is in the workspace, three times over."


async def _herald_round(
    services: Gateway,
    channel: CountingChannel,
    fake: FakeOpenAI,
    *,
    tag: str,
    runs: int,
    turns_per_chat: int,
) -> tuple[float, float, list[bytes]]:
    """(CPU seconds, wall seconds, request bodies) of ``runs`` chat turns."""
    expected = f"done after {fake.tool_rounds} tools"
    first = len(channel.sent)
    fake.record = []
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(runs):
        await channel.receive(channel.message(TEXT, f"{tag}-{n // turns_per_chat}"))
        await channel.wait_sent(first + n + 1)
    await services.store.flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    bodies, fake.record = fake.record, None
    wrong = [m.text for m in channel.sent[first:] if m.text != expected]
    if wrong:
        raise SystemExit(f"bench.turns: unexpected reply {wrong[0]!r}")
    if len(bodies) != runs * (fake.tool_rounds + 1):
        raise SystemExit(f"bench.turns: {len(bodies)} model calls for {runs} runs")
    return cpu, wall, bodies


def _check_tool(services: Gateway, tool: str) -> None:
    """The fake's tool call must be valid and allowed, or the rounds would measure errors."""
    services.tools.validate(tool, TOOL_ARGUMENTS.get(tool, {}))
    if tool not in tools_for_agent(services.settings, "main", services.tools):
        raise SystemExit(f"bench.turns: the agent may not use {tool!r}")


async def _baseline_round(url: str, bodies: list[bytes]) -> tuple[float, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    await replay(url, bodies)
    return time.process_time() - cpu, time.perf_counter() - wall


async def _measure(
    runs: int, tool_rounds: int, turns_per_chat: int, rounds: int, tool: str
) -> list[Row]:
    herald: list[tuple[float, float]] = []
    baseline: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai(tool_rounds=tool_rounds, tool=tool) as fake:
            url = f"{fake.base_url}/chat/completions"
            settings = bench_settings(Path(tmp) / "state", fake.base_url)
            channel = CountingChannel()
            async with running_services(settings, Path(tmp), channel) as services:
                _check_tool(services, tool)
                warm = min(WARMUP_RUNS, runs)
                _, _, bodies = await _herald_round(
                    services, channel, fake, tag="warm", runs=warm, turns_per_chat=turns_per_chat
                )
                await _baseline_round(url, bodies)
                for r in range(rounds):
                    cpu, wall, bodies = await _herald_round(
                        services,
                        channel,
                        fake,
                        tag=f"r{r}",
                        runs=runs,
                        turns_per_chat=turns_per_chat,
                    )
                    herald.append((cpu, wall))
                    baseline.append(await _baseline_round(url, bodies))
    h_cpu, b_cpu = min(c for c, _ in herald), min(c for c, _ in baseline)
    h_wall, b_wall = min(w for _, w in herald), min(w for _, w in baseline)
    per = 1000 / runs
    calls = tool_rounds + 1
    goal = f"ratio <= {RATIO_GOAL}" if tool == TOOL else "report (includes the tool's work)"
    return [
        row(
            f"CPU ms per run ({runs:,} runs, {calls} model calls, {tool_rounds}× {tool})",
            h_cpu * per,
            b_cpu * per,
            goal,
        ),
        row(f"wall ms per run, {tool} (one at a time)", h_wall * per, b_wall * per, "report"),
    ]


def run(
    runs: int = RUNS,
    *,
    tool_rounds: int = TOOL_ROUNDS,
    turns_per_chat: int = TURNS_PER_CHAT,
    rounds: int = ROUNDS,
    tool: str = TOOL,
) -> list[Row]:
    """Run the per-turn benchmark and its bare-client baseline; one row per figure.

    ``tool`` is the tool the fake model calls in each tool round; the default also runs a
    pass with ``ls`` for information.
    """
    rows = asyncio.run(_measure(runs, tool_rounds, turns_per_chat, rounds, tool))
    if tool == TOOL:
        rows += asyncio.run(_measure(runs, tool_rounds, turns_per_chat, rounds, FS_TOOL))
    return rows


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()

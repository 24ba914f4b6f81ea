"""Chat commands carried out: each answers with one text for the chat it came from.

Parsing is tested in test_commands; here a real gateway (scripted model) runs them through
:class:`ChatCommands`, built over its parts with a clock of the test's choosing.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.runtime import ChatCommand, ChatCommands, parse_command
from gateway.runtime.chat_commands import log_lines
from gateway.state import Origin, RunRecord, SessionRecord
from gateway.subagents import RunFinishedError, SpawnRequest
from gateway.usage import format_runtime
from tests.gateway.harness import HANG_GUARD_SECONDS, Harness, running_gateway
from tests.gateway.nested import pair_script, record_nested_run

CHAT_KEY = "agent:main:memory:channel:c1"
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Harness]:
    # The lane is held in some tests: more queued runs than the default limit of a session.
    room = {"agent": {"subagents": {"maxChildrenPerSession": 100}}}
    async with running_gateway(tmp_path, config=room) as harness:
        yield harness


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def commands(gw: Harness, clock: Clock) -> ChatCommands:
    return ChatCommands(
        db=gw.db,
        store=gw.store,
        turns=gw.turns,
        spawner=gw.spawner,
        runs=gw.runs,
        contexts=gw.contexts,
        clock=clock,
    )


@pytest.fixture
async def chat(gw: Harness) -> SessionRecord:
    return await gw.store.ensure(CHAT_KEY, origin=ORIGIN)


@pytest.fixture
async def paused(gw: Harness) -> AsyncIterator[None]:
    """The sub-agent lane is held: spawned runs stay queued."""
    gate = asyncio.Event()
    blocker = gw.lanes.subagent.submit(gate.wait)
    yield
    gate.set()
    await blocker


async def ask(commands: ChatCommands, session: SessionRecord, text: str) -> str:
    command = parse_command(text)
    assert command is not None, text
    return await commands.run(command, session)


async def spawn(gw: Harness, session: SessionRecord, task: str, label: str | None = None) -> str:
    result = await gw.spawn(gw.contexts.for_session(session), SpawnRequest(task, label=label))
    assert result["status"] == "accepted", result
    return str(result["runId"])


async def test_list_shows_the_newest_ten_runs_of_the_conversation_with_their_age(
    gw: Harness, commands: ChatCommands, chat: SessionRecord, clock: Clock, paused: None
) -> None:
    assert await ask(commands, chat, "/subagents") == "No sub-agent runs in this conversation."
    ids = [await spawn(gw, chat, f"task: {n}", label=f"job {n}") for n in range(12)]
    newest = await gw.db.runs.get(ids[-1])
    assert newest is not None
    clock.now = newest.progress.created_at + 125
    lines = (await ask(commands, chat, "/subagents list")).splitlines()
    assert len(lines) == 10
    assert lines[0] == f"{ids[-1][:8]} queued      2m5s ago  job 11"
    assert [line.split()[0] for line in lines] == [i[:8] for i in reversed(ids[2:])]


async def test_a_run_is_named_by_a_prefix_of_its_id_within_the_conversation(
    gw: Harness, commands: ChatCommands, chat: SessionRecord, paused: None
) -> None:
    other = await gw.store.ensure("agent:main:memory:channel:c2", origin=ORIGIN)
    elsewhere = await spawn(gw, other, "task: theirs")
    assert await ask(commands, chat, f"/subagents info {elsewhere}") == (
        f"No run of this conversation matches {elsewhere!r}."
    )
    # Seventeen runs: two of them share a first hex digit (there are sixteen).
    ids = [await spawn(gw, chat, f"task: {n}") for n in range(17)]
    shared, _ = Counter(run_id[0] for run_id in ids).most_common(1)[0]
    assert await ask(commands, chat, f"/subagents info {shared}") == (
        f"More than one run of this conversation matches {shared!r}."
    )
    info = await ask(commands, chat, f"/subagents info {ids[0][:8].upper()}")
    assert info.startswith(f"Run {ids[0]} (task: 0): queued\n")


async def test_log_shows_the_last_messages_of_a_run_cut_short(
    gw: Harness, commands: ChatCommands, chat: SessionRecord
) -> None:
    gate = asyncio.Event()
    blocker = gw.lanes.subagent.submit(gate.wait)
    run_id = await spawn(gw, chat, "task: " + "x" * 400)
    assert await ask(commands, chat, f"/subagents log {run_id[:8]}") == (
        "The run's transcript is empty."
    )
    gate.set()
    await blocker
    await gw.finished(run_id)
    log = (await ask(commands, chat, f"/subagents log {run_id[:8]}")).splitlines()
    # One 400-letter word has no boundary to cut at: cut where the limit is, marked.
    assert log[0] == "user: " + ("task: " + "x" * 400)[:299] + "…"
    assert log[1].startswith("assistant: done: xxx")
    assert all(len(line) <= len("assistant: ") + 300 for line in log)
    # The run's conversation: Herald's announce question is left out, its answer named.
    assert not any("[announce]" in line for line in log)
    assert log[-1].startswith("announce: ")


def test_log_lines_cut_at_words_and_leave_the_announce_prompt_out() -> None:
    words = " ".join(f"word{n}" for n in range(100))
    lines = log_lines(
        [
            {"role": "user", "content": words},
            {"role": "assistant", "content": "short"},
            {"role": "user", "content": "[announce] Your sub-agent run has ended"},
            {"role": "assistant", "content": "Posted text"},
        ]
    )
    assert lines[1:] == ["assistant: short", "announce: Posted text"]
    head = lines[0].removeprefix("user: ")
    assert head.endswith("…")
    assert len(head) <= 300
    assert words.startswith(head.removesuffix("…") + " ")  # ends on a whole word


async def test_stop_of_one_run_then_again(
    gw: Harness, commands: ChatCommands, chat: SessionRecord, paused: None
) -> None:
    run_id = await spawn(gw, chat, "task: x")
    assert await ask(commands, chat, f"/subagents stop {run_id[:8]}") == (
        f"Stopping sub-agent run {run_id[:8]}."
    )
    run = await gw.finished(run_id)
    assert run.progress.status == "cancelled"
    again = await ask(commands, chat, f"/subagents stop {run_id[:8]}")
    assert again == f"run {run_id} already finished (cancelled)"


async def test_spawn_from_a_sub_agent_session_is_not_started(
    gw: Harness, commands: ChatCommands, chat: SessionRecord
) -> None:
    answer = await ask(commands, chat, "/spawn task: via command")
    (run,) = await gw.db.runs.list(parent_session_key=CHAT_KEY)
    assert answer == (f"Started sub-agent run {run.run_id[:8]}; its result will be posted here.")
    child = await gw.store.require(run.child_session_key)
    refused = await commands.run(ChatCommand("spawn", argument="task: nested"), child)
    assert refused == "Not started: sessions_spawn is not allowed from sub-agent sessions"


async def test_stop_counts_the_reply_in_progress_and_the_runs_it_stopped(
    gw: Harness, commands: ChatCommands, chat: SessionRecord
) -> None:
    run_id = await spawn(gw, chat, "task-slow: run")
    await gw.status(run_id, "running")
    await gw.say("task-slow: reply")  # a turn the scripted model answers in 30 s
    answer = await ask(commands, chat, "/stop")
    assert answer == "Stopped the reply in progress and 1 sub-agent."
    assert (await gw.finished(run_id)).progress.status == "cancelled"


async def test_stop_with_nothing_running_says_so_in_words(
    commands: ChatCommands, chat: SessionRecord
) -> None:
    assert await ask(commands, chat, "/stop") == (
        "Nothing to stop: no reply is in progress and no sub-agent is running here."
    )


async def test_stop_all_stops_every_run_of_the_conversation_and_only_those(
    gw: Harness, commands: ChatCommands, chat: SessionRecord, paused: None
) -> None:
    other = await gw.store.ensure("agent:main:memory:channel:c2", origin=ORIGIN)
    theirs = await spawn(gw, other, "task: theirs")
    ours = [await spawn(gw, chat, f"task: {n}") for n in range(3)]
    assert await ask(commands, chat, "/subagents stop all") == (
        "Stopping 3 sub-agent runs (the runs they spawned included)."
    )
    assert [(await gw.finished(run_id)).progress.status for run_id in ours] == ["cancelled"] * 3
    assert (await gw.db.runs.get(theirs)) is not None
    assert (await gw.db.runs.get(theirs)).progress.status == "queued"  # type: ignore[union-attr]
    assert await ask(commands, chat, "/subagents stop ALL") == (
        "No sub-agent run of this conversation is running."
    )


async def test_after_new_the_list_shows_the_new_conversation_s_runs_only(
    gw: Harness, commands: ChatCommands, chat: SessionRecord, paused: None
) -> None:
    before = await spawn(gw, chat, "task: before")
    await gw.store.renew(CHAT_KEY)
    renewed = await gw.store.require(CHAT_KEY)
    assert await ask(commands, renewed, "/subagents list") == (
        "No sub-agent runs in this conversation."
    )
    assert await ask(commands, renewed, f"/subagents info {before[:8]}") == (
        f"No run of this conversation matches {before[:8]!r}."
    )
    after = await spawn(gw, renewed, "task: after")
    lines = (await ask(commands, renewed, "/subagents list")).splitlines()
    assert [line.split()[0] for line in lines] == [after[:8]]


async def test_unknown_commands_are_answered_and_never_reach_the_model(gw: Harness) -> None:
    await gw.say("/status")
    notice = (await gw.wait_sent(lambda m: m.kind == "notice"))[0]
    assert notice.text == "Unknown command /status; see /help for the commands."
    # No turn ran: the chat's conversation holds no message (a turn writes the user's first).
    session = await gw.store.get(CHAT_KEY)
    assert session is None or await gw.store.history(CHAT_KEY) == []
    assert [m.kind for m in gw.channel.sent] == ["notice"]


async def test_stop_racing_aborts_stops_the_run_once(
    gw: Harness, commands: ChatCommands, chat: SessionRecord
) -> None:
    run_id = await spawn(gw, chat, "task-slow: x")
    await gw.status(run_id, "running")
    calls = []
    for _ in range(25):
        calls += [commands.stop(CHAT_KEY), gw.runs.abort(run_id)]
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        results = await asyncio.gather(*calls, return_exceptions=True)
    stops = [r for r in results if isinstance(r, tuple)]
    aborted = [r for r in results if isinstance(r, RunRecord)]
    refused = [r for r in results if isinstance(r, RunFinishedError)]
    assert len(stops) + len(aborted) + len(refused) == len(results), results
    assert sum(runs for _, runs in stops) + len(aborted) == 1, results
    run = await gw.finished(run_id)
    assert run.progress.status == "cancelled"
    assert (await gw.delivery(run_id)).state == "delivered"
    announces = [m for m in gw.channel.sent if m.kind == "announce" and m.run_id == run_id]
    assert len(announces) == 1


async def test_list_shows_the_runs_a_run_spawned_below_it_and_each_run_s_batch(
    tmp_path: Path, clock: Clock
) -> None:
    async with running_gateway(tmp_path, script=pair_script()) as gw:
        commands = ChatCommands(
            db=gw.db,
            store=gw.store,
            turns=gw.turns,
            spawner=gw.spawner,
            runs=gw.runs,
            contexts=gw.contexts,
            clock=clock,
        )
        await gw.say("pair")
        await gw.wait_sent(lambda m: m.kind == "reply" and m.text.startswith("both"))
        await gw.runs_idle()
        tea, coffee = await gw.db.runs.list(parent_session_key=CHAT_KEY, oldest_first=True)
        assert tea.delivery.batch_id is not None
        batch = tea.delivery.batch_id[:8]
        child = await record_nested_run(
            gw.db, tea, "notes", created_at=coffee.progress.created_at + 1
        )
        deep = await record_nested_run(
            gw.db, child, "sources", status="running", created_at=coffee.progress.created_at + 2
        )
        clock.now = coffee.progress.created_at + 62
        chat = await gw.store.require(CHAT_KEY)

        lines = (await ask(commands, chat, "/subagents list")).splitlines()

        def age(run: RunRecord) -> str:
            return format_runtime(clock.now - run.progress.created_at)

        assert lines == [
            f"{coffee.run_id[:8]} done        {age(coffee)} ago  coffee  [batch {batch}]",
            f"{tea.run_id[:8]} done        {age(tea)} ago  tea  [batch {batch}]",
            f"{child.run_id[:8]} done        1m1s ago    ↳ notes",
            f"{deep.run_id[:8]} running     1m0s ago      ↳ sources",
        ]
        # A run shown below another answers to its id too.
        info = await ask(commands, chat, f"/subagents info {child.run_id[:8]}")
        assert info.startswith(f"Run {child.run_id} (notes): done\n")
        assert f"depth 2 • parent run {tea.run_id}\n" in info
        tea_info = await ask(commands, chat, f"/subagents info {tea.run_id[:8]}")
        assert f"depth 1 • batch {tea.delivery.batch_id}\n" in tea_info


async def test_stop_of_one_run_stops_the_runs_it_spawned(
    gw: Harness, commands: ChatCommands, chat: SessionRecord, paused: None
) -> None:
    run_id = await spawn(gw, chat, "task: orchestrate")
    parent = await gw.db.runs.get(run_id)
    assert parent is not None
    child = await record_nested_run(gw.db, parent, "child", status="queued")
    grandchild = await record_nested_run(gw.db, child, "grandchild", status="queued")
    answer = await ask(commands, chat, f"/subagents stop {run_id[:8]}")
    assert answer == f"Stopping sub-agent run {run_id[:8]} and 2 runs it spawned."
    for stopped in (run_id, child.run_id, grandchild.run_id):
        assert (await gw.finished(stopped)).progress.status == "cancelled"

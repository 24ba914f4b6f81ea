"""Fixtures of the chat runtime tests: a running gateway whose model is the wire-level
OpenAI fake, and chat parts (turns, router) built over it with lanes of the test's choosing;
every part is closed when the test ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.delivery import Replier
from gateway.runtime import ChatCommands, ChatTurns, Router
from lanes import Lane
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.gateway.harness import Harness, fake_model_config, running_gateway


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with openai_server() as fake:
        yield fake


@pytest.fixture
async def gw(tmp_path: Path, model: FakeOpenAI) -> AsyncIterator[Harness]:
    async with running_gateway(tmp_path, config=fake_model_config(model)) as harness:
        yield harness


@pytest.fixture
def make_commands(gw: Harness) -> Callable[[ChatTurns], ChatCommands]:
    def make(turns: ChatTurns) -> ChatCommands:
        return ChatCommands(
            db=gw.db,
            store=gw.store,
            turns=turns,
            spawner=gw.spawner,
            runs=gw.runs,
            contexts=gw.contexts,
        )

    return make


MakeTurns = Callable[..., ChatTurns]


@pytest.fixture
async def make_turns(gw: Harness) -> AsyncIterator[MakeTurns]:
    """Chat turns over ``gw``'s parts on the given lanes (default: the gateway's own)."""
    made: list[ChatTurns] = []

    def make(*, session_lane: Lane | None = None, main_lane: Lane | None = None) -> ChatTurns:
        turns = ChatTurns(
            conversations=gw.conversations,
            session_lane=session_lane or gw.lanes.session,
            main_lane=main_lane or gw.lanes.main,
            channels=gw.channels,
            replier=Replier(gw.channels),
        )
        made.append(turns)
        return turns

    yield make
    for turns in made:
        await turns.close(0)


MakeRouter = Callable[[ChatTurns], Router]


@pytest.fixture
def make_router(gw: Harness, make_commands: Callable[[ChatTurns], ChatCommands]) -> MakeRouter:
    def make(turns: ChatTurns) -> Router:
        return Router(
            holder=gw.holder,
            store=gw.store,
            turns=turns,
            commands=make_commands(turns),
            replier=Replier(gw.channels),
        )

    return make

"""StoreSink: a turn's messages go to the session transcript as they happen, and its usage
to the session's (and the run's) totals in one write per turn, never twice."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.agent import StoreSink
from gateway.llm import ChatMessage, Usage
from gateway.metrics import Metrics
from gateway.sessions import SessionStore
from gateway.settings import ModelCost
from gateway.state import SessionRecord
from tests.gateway.sessions.support import opened_store
from tests.gateway.state.records import run_record

PRICE = ModelCost(input=2.0, output=10.0)  # USD per million tokens


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with opened_store(tmp_path / "state") as opened:
        yield opened


async def child_with_run(store: SessionStore) -> tuple[SessionRecord, str]:
    child = await store.ensure(f"agent:main:subagent:{uuid.uuid4()}")
    run = run_record(child)
    await store.db.runs.insert(run)
    return child, run.run_id


def reply(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


async def test_messages_and_events_reach_the_transcript_in_order(store: SessionStore) -> None:
    session = await store.ensure("agent:main:main")
    sink = StoreSink(store, session)
    await sink.message(ChatMessage(role="user", content="hi"))
    await sink.message(reply("hello"), model="m-2025", usage=Usage(input=5, output=1))
    await sink.event("empty_reply", {"model": "m-2025"})
    await sink.sync()
    records = (await store.read(session.key)).records
    body = [(r["type"], r.get("message", {}).get("content") or r.get("event")) for r in records]
    assert body[1:] == [("message", "hi"), ("message", "hello"), ("event", "empty_reply")]
    assert records[2]["message"]["model"] == "m-2025"


async def test_usage_and_cost_are_added_to_session_and_run_once(store: SessionStore) -> None:
    child, run_id = await child_with_run(store)
    sink = StoreSink(store, child, cost=PRICE, run_id=run_id)
    await sink.message(reply("a"), usage=Usage(input=1000, output=100))
    await sink.message(reply("b"), usage=Usage(input=3000, output=300))
    assert sink.usage == Usage(input=4000, output=400)
    assert sink.cost_usd == pytest.approx((4000 * 2.0 + 400 * 10.0) / 1e6)
    await sink.save_usage()
    await sink.save_usage()  # nothing new: nothing added
    await sink.message(reply("c"), usage=Usage(input=10, output=1))
    await sink.save_usage()
    session = await store.require(child.key)
    run = await store.db.runs.get(run_id)
    assert run is not None
    for usage, cost in (
        (session.usage, session.cost_usd),
        (run.progress.usage, run.progress.cost_usd),
    ):
        assert usage == Usage(input=4010, output=401)
        assert cost == pytest.approx((4010 * 2.0 + 401 * 10.0) / 1e6)


async def test_an_unpriced_model_adds_tokens_but_no_cost(store: SessionStore) -> None:
    session = await store.ensure("agent:main:main")
    sink = StoreSink(store, session)
    await sink.message(reply("a"), usage=Usage(input=7, output=3))
    await sink.save_usage()
    saved = await store.require(session.key)
    assert (saved.usage, saved.cost_usd) == (Usage(input=7, output=3), None)
    assert sink.cost_usd is None


async def test_saving_usage_never_raises(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    session = await store.ensure("agent:main:main")
    sink = StoreSink(store, session, run_id="no-such-run")
    await sink.message(reply("a"), usage=Usage(input=7, output=3))
    with caplog.at_level(logging.ERROR, logger="gateway.agent.sink"):
        await sink.save_usage()  # the run is unknown: logged, not raised
    assert [r.getMessage() for r in caplog.records] == ["usage not saved"]
    assert (await store.require(session.key)).usage == Usage(input=7, output=3)


async def test_each_model_call_is_counted_under_the_configured_model(store: SessionStore) -> None:
    session = await store.ensure("agent:main:main")
    metrics = Metrics()
    sink = StoreSink(store, session, cost=PRICE, metrics=metrics, model_ref="oa/gpt-4o")
    await sink.message(reply("a"), model="gpt-4o-2024-08-06", usage=Usage(input=100, output=20))
    await sink.message(ChatMessage(role="user", content="no usage, no call"))

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("herald_model_calls_total", model="oa/gpt-4o") == 1
    assert sample("herald_model_tokens_total", model="oa/gpt-4o", kind="input") == 100
    assert sample("herald_model_tokens_total", model="oa/gpt-4o", kind="output") == 20
    assert sample("herald_model_cost_usd_total", model="oa/gpt-4o") == pytest.approx(
        (100 * 2.0 + 20 * 10.0) / 1e6
    )
    assert sample("herald_model_calls_total", model="gpt-4o-2024-08-06") is None

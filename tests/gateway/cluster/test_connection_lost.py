"""A write whose connection PostgreSQL drops under it (as a server restarting does) is made
again once the database answers: no run fails for it, no announce is left unrecorded, no
queue job is left held. Each test cuts the connection of one real write, once, from inside
the server (:func:`tests.postgres.cut_connection`), on a one-replica gateway."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from gateway.delivery import UNCERTAIN
from tests import postgres
from tests.gateway.harness import HANG_GUARD_SECONDS, Harness, running_gateway
from tests.pgproxy import AnswerCutter

pytestmark = pytest.mark.postgres

OUTBOX_LOGGER = "gateway.delivery.outbox"


@pytest.fixture
async def gw(tmp_path: Path, pg_url: str) -> AsyncIterator[Harness]:
    async with running_gateway(tmp_path, database_url=pg_url, replica_id="a") as started:
        yield started


async def spawned(gw: Harness, task: str) -> str:
    """Spawn ``task`` from a chat (its announce goes there); the run's id."""
    await gw.say(f"bg {task}")
    return (await gw.reply()).text.split()[-1]


async def job_statuses(pg_url: str, run_id: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cursor = await conn.execute(
            "SELECT status::text FROM procrastinate_jobs WHERE lock = %s ORDER BY id", [run_id]
        )
        return [str(row[0]) for row in await cursor.fetchall()]


def announces_of(gw: Harness, run_id: str) -> int:
    return sum(1 for m in gw.channel.sent if m.kind == "announce" and m.run_id == run_id)


async def test_a_run_whose_start_was_not_recorded_runs_rather_than_failing(
    gw: Harness, pg_url: str
) -> None:
    when = "OLD.status = 'queued' AND NEW.status = 'running'"
    await asyncio.to_thread(
        postgres.cut_connection, pg_url, "start", table="runs", event="UPDATE", when=when
    )
    run_id = await spawned(gw, "task: through")
    item = await gw.delivery(run_id)
    run = await gw.db.runs.get(run_id)

    assert postgres.cuts(pg_url, "start") == 2  # the start lost, then made again
    assert run is not None
    # Not "error: internal error: StateUnavailableError": the database failed, not the run.
    assert (run.progress.status, run.progress.result_text, run.progress.error) == (
        "done",
        "done: through",
        None,
    )
    assert item.state == "delivered"
    assert announces_of(gw, run_id) == 1


async def test_a_delivered_announce_whose_record_was_cut_off_is_recorded_once_back(
    gw: Harness, pg_url: str
) -> None:
    when = "NEW.state = 'delivered'"
    await asyncio.to_thread(
        postgres.cut_connection, pg_url, "sent", table="outbox", event="UPDATE", when=when
    )
    run_id = await spawned(gw, "task: told")
    # Left "sending", the item would wait for a restart to be asked about, its run "queued".
    item = await gw.delivery(run_id)
    run = await gw.db.runs.get(run_id)

    assert postgres.cuts(pg_url, "sent") == 2
    assert item.state == "delivered"
    assert run is not None
    assert (run.progress.status, run.delivery.announce_state) == ("done", "delivered")
    assert announces_of(gw, run_id) == 1  # recorded again, never sent again


async def test_an_announce_whose_sending_mark_was_cut_off_is_sent_once_back(
    gw: Harness, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    when = "NEW.state = 'sending'"
    await asyncio.to_thread(
        postgres.cut_connection, pg_url, "mark", table="outbox", event="UPDATE", when=when
    )
    caplog.set_level(logging.DEBUG, logger=OUTBOX_LOGGER)
    run_id = await spawned(gw, "task: marked")
    item = await gw.delivery(run_id)

    assert postgres.cuts(pg_url, "mark") == 2
    assert item.state == "delivered"
    assert announces_of(gw, run_id) == 1  # the mark was not made: nothing was sent then
    # The database away is said once, as a warning: no traceback for what is no bug.
    said = [
        (r.levelno, r.getMessage(), r.exc_info) for r in caplog.records if r.name == OUTBOX_LOGGER
    ]
    assert (logging.WARNING, "outbox: state database unavailable; trying again", None) in said
    assert [s for s in said if s[0] >= logging.ERROR] == []


async def test_a_sending_mark_kept_but_never_confirmed_is_settled_without_a_restart(
    tmp_path: Path, pg_url: str
) -> None:
    port = urlsplit(pg_url).port
    assert port is not None
    async with (
        AnswerCutter(port) as proxy,
        running_gateway(tmp_path, database_url=proxy.url(pg_url), replica_id="a") as gw,
    ):
        proxy.arm(b"SET state = 'sending'")
        run_id = await spawned(gw, "task: doubted")
        # Left "sending" by a live replica, the item would wait for its next start.
        item = await gw.delivery(run_id)
        run = await gw.db.runs.get(run_id)

    assert proxy.cuts == 1  # the mark was kept; its answer was lost with the connection
    # Asked about as after a crash: the memory chat keeps no record to search, so the
    # announce is settled as uncertain, never sent on a guess (at most once).
    assert (item.state, item.last_error) == ("failed", UNCERTAIN)
    assert run is not None
    assert run.delivery.announce_state == "uncertain"
    assert announces_of(gw, run_id) == 0


async def test_a_job_whose_end_was_not_recorded_is_ended_once_back(
    gw: Harness, pg_url: str
) -> None:
    # Procrastinate deletes a job that succeeded (Herald keeps none).
    await asyncio.to_thread(
        postgres.cut_connection,
        pg_url,
        "end",
        table="procrastinate_jobs",
        event="DELETE",
        when="OLD.status = 'doing'",
    )
    run_id = await spawned(gw, "task: ended")
    await gw.delivery(run_id)
    # Left "doing" under a worker that still beats, the job would hold the run's lock for
    # good: a retry of the run could never start, and no replica would take the job over.
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:  # polled: nothing in the gateway tells when a job's row goes
            if await job_statuses(pg_url, run_id) == []:
                break
            await asyncio.sleep(0.05)

    assert postgres.cuts(pg_url, "end") == 2
    run = await gw.db.runs.get(run_id)
    assert run is not None
    assert run.progress.status == "done"
    assert announces_of(gw, run_id) == 1


async def test_a_job_end_made_but_unconfirmed_counts_as_made_when_refused_again(
    tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = urlsplit(pg_url).port
    assert port is not None
    caplog.set_level(logging.INFO)
    async with (
        AnswerCutter(port) as proxy,
        running_gateway(tmp_path, database_url=proxy.url(pg_url), replica_id="a") as gw,
    ):
        proxy.arm(b"procrastinate_finish_job_v1")  # its pool connection commits after it
        run_id = await spawned(gw, "task: twice")
        await gw.delivery(run_id)
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while True:  # polled: nothing in the gateway tells when a job's row goes
                settled = "sub-agent job's end was recorded before" in caplog.messages
                if settled and await job_statuses(pg_url, run_id) == []:
                    break
                await asyncio.sleep(0.05)

    assert proxy.cuts == 1  # the job's end was made; its answer was lost
    # Made again, the end is refused (the job is gone): the first one counts, and the
    # refusal is no error (else "Task exception was never retrieved").
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_stop_does_not_wait_for_a_job_end_the_database_keeps_refusing(
    tmp_path: Path, pg_url: str
) -> None:
    async with running_gateway(tmp_path, database_url=pg_url, replica_id="a") as gw:
        await asyncio.to_thread(
            postgres.cut_connection, pg_url, "ends", table="procrastinate_jobs",
            event="DELETE", when="OLD.status = 'doing'", times=1_000_000,
        )  # fmt: skip
        run_id = await spawned(gw, "task: stuck")
        await gw.delivery(run_id)
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while postgres.cuts(pg_url, "ends") < 2:  # noqa: ASYNC110 - polled: another connection
                await asyncio.sleep(0.05)
        # The stop follows (running_gateway fails it as hung if it never ends).

    # Left "doing" under a worker that beats no more: the stalled-job check's to put back.
    assert await job_statuses(pg_url, run_id) == ["doing"]

"""``herald doctor`` names the scheduled jobs whose chat cannot be reached: a stored job aimed
at a channel that is not enabled, and a declared job whose channel fails its check."""

from __future__ import annotations

import time
from pathlib import Path

from gateway.constants import STATE_DB_NAME
from gateway.schedules.store import JobRecord, JobsTable
from gateway.state import SqliteStateDB
from tests.gateway.commands.test_doctor import about, fake_slack, run, slack
from tests.gateway.harness import merge


async def store_job(tmp_path: Path, job_id: str, target: str) -> None:
    db = await SqliteStateDB.open(tmp_path / "state" / STATE_DB_NAME)
    try:
        now = time.time()
        await JobsTable(db).insert(
            JobRecord(
                job_id=job_id,
                trigger_kind="every",
                trigger_value="1h",
                timezone="UTC",
                anchor=now,
                agent_id="main",
                task="t",
                to_target=target,
                created_at=now,
                next_run_at=now + 3600,
            )
        )
    finally:
        await db.close()


async def test_a_job_aimed_at_a_disabled_channel_fails(tmp_path: Path) -> None:
    await store_job(tmp_path, "to-slack", "slack:C0123456789")
    await store_job(tmp_path, "to-webchat", "webchat:room")
    findings = await run(tmp_path, {"channels": {"webchat": {"enabled": True}}})
    found = about(findings, "schedule to-slack")
    assert found.level == "FAIL"
    assert "slack:C0123456789 cannot be reached" in found.message
    assert "'slack' is not enabled" in found.message
    assert not [f for f in findings if f.subject == "schedule to-webchat"]


async def test_a_declared_job_whose_channel_fails_its_check_fails(tmp_path: Path) -> None:
    job = {"id": "brief", "every": "1h", "task": "t", "to": "slack:C0123456789"}
    async with fake_slack() as fake:
        findings = await run(
            tmp_path, merge(slack(fake, "xoxb-wrong"), {"schedules": {"jobs": [job]}})
        )
        assert about(findings, "slack").level == "FAIL"
        found = about(findings, "schedule brief")
        assert found.level == "FAIL"
        assert "channel 'slack' fails its check" in found.message


async def test_reachable_jobs_are_ok(tmp_path: Path) -> None:
    job = {"id": "brief", "every": "1h", "task": "t", "to": "webchat:room"}
    findings = await run(
        tmp_path, {"channels": {"webchat": {"enabled": True}}, "schedules": {"jobs": [job]}}
    )
    assert about(findings, "schedules").message == "1 job(s), each chat reachable"

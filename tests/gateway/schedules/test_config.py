"""Declared jobs: each mistake is a config error naming file, line and key (exit 78 before
anything starts)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.config import load_settings
from gateway.errors import ConfigError
from gateway.schedules.setup import SCHEDULES
from tests.gateway.conftest import WriteFile
from tests.gateway.harness import hang_guard, running_gateway
from tests.gateway.test_reload_apply import reload_with

GOOD = '{ id: "brief", cron: "0 9 * * 1-5", task: "Summarise.", to: "webchat:abc" }'


#: Values that passed ``config check`` and then crashed ``herald run`` (exit 1, a restart loop
#: under systemd): each is a config error naming its key, and ``run`` exits 78.
HOSTILE = [
    (
        '{ id: "x", every: "3000000d", task: "t", to: "webchat:abc" }',
        "schedules.jobs[1].every",
        "'3000000d' is longer than 366d",
    ),
    (
        '{ id: "x", at: "9999-12-31T23:59:59-14:00", task: "t", to: "webchat:abc" }',
        "schedules.jobs[1].at",
        "is out of the range of times",
    ),
    (
        '{ id: "x", at: "2999-01-01T00:00:00Z", task: "t", to: "webchat:abc" }',
        "schedules.jobs[1].at",
        "is more than 10 years ahead",
    ),
    (
        '{ id: "x", cron: "0 9 * * *", timezone: "America", task: "t", to: "webchat:abc" }',
        "schedules.jobs[1].timezone",
        "unknown time zone 'America'",
    ),
    (
        f'{{ id: "x", every: "1h", timezone: "{"A" * 300}", task: "t", to: "webchat:abc" }}',
        "schedules.jobs[1].timezone",
        "at most 64 characters",
    ),
    (
        '{ id: "x", cron: "0 0 31 4 *", task: "t", to: "webchat:abc" }',
        "schedules.jobs[1].cron",
        "'0 0 31 4 *' never fires",
    ),
]


def config_with(job: str) -> str:
    return f"{{\n  schedules: {{\n    jobs: [\n      {GOOD},\n      {job},\n    ],\n  }},\n}}\n"


@pytest.mark.parametrize(
    ("job", "key", "words"),
    [
        (
            '{ id: "x", cron: "0 9 * * *", every: "1h", task: "t", to: "webchat:abc" }',
            "schedules.jobs[1]",
            "exactly one of cron, every and at (this one has cron and every)",
        ),
        ('{ id: "x", task: "t", to: "webchat:abc" }', "schedules.jobs[1]", "(this one has none)"),
        (
            '{ id: "x", cron: "0 9 * *", task: "t", to: "webchat:abc" }',
            "schedules.jobs[1].cron",
            "is no crontab",
        ),
        (
            '{ id: "x", every: "30s", task: "t", to: "webchat:abc" }',
            "schedules.jobs[1].every",
            "shorter than schedules.minEverySeconds (60s)",
        ),
        (
            '{ id: "x", at: "2020-01-01T09:00:00Z", task: "t", to: "webchat:abc" }',
            "schedules.jobs[1].at",
            "is in the past",
        ),
        (
            '{ id: "x", every: "1h", task: "t", to: "slack:C0123456789" }',
            "schedules.jobs[1].to",
            "channel 'slack' is not enabled",
        ),
        (
            '{ id: "x", every: "1h", task: "t", to: "teams:abc" }',
            "schedules.jobs[1].to",
            "unknown channel 'teams'",
        ),
        (
            '{ id: "x", every: "1h", task: "t", to: "webchat:abc", agentId: "nobody" }',
            "schedules.jobs[1].agentId",
            "'nobody' is not one of",
        ),
        (
            '{ id: "Bad Id", every: "1h", task: "t", to: "webchat:abc" }',
            "schedules.jobs[1].id",
            "should match pattern",
        ),
        *HOSTILE,
    ],
)
def test_a_bad_declared_job_names_file_line_and_key(
    write: WriteFile, job: str, key: str, words: str
) -> None:
    path = write("herald.json5", config_with(job))
    with pytest.raises(ConfigError) as excinfo:
        load_settings(path, environ={})
    (issue,) = excinfo.value.issues
    assert issue.file == str(path)
    assert issue.line == 5, str(issue)  # the second job's line
    assert issue.key is not None
    assert issue.key.startswith(key), str(issue)
    assert words in issue.message, str(issue)


def test_two_jobs_with_one_id_are_an_error(write: WriteFile) -> None:
    path = write("herald.json5", config_with(GOOD))
    with pytest.raises(ConfigError, match="job id 'brief' is declared twice"):
        load_settings(path, environ={})


def test_good_jobs_load(write: WriteFile) -> None:
    job = '{ id: "tick", every: "15m", task: "t", to: "webchat:abc", timezone: "Asia/Tokyo" }'
    loaded = load_settings(write("herald.json5", config_with(job)), environ={})
    jobs = loaded.settings.schedules.jobs
    assert [j.id for j in jobs] == ["brief", "tick"]
    assert jobs[1].trigger("UTC").timezone == "Asia/Tokyo"


def test_a_declared_target_is_kept_in_its_written_form(write: WriteFile) -> None:
    job = '{ id: "tick", every: "15m", task: "t", to: "  WebChat:abc\t" }'
    loaded = load_settings(write("herald.json5", config_with(job)), environ={})
    assert loaded.settings.schedules.jobs[1].to == "webchat:abc"


async def test_a_reload_applies_the_files_jobs_and_keeps_their_pause(tmp_path: Path) -> None:
    first = {"id": "brief", "every": "1h", "task": "task: a", "to": "webchat:room"}
    config = {"channels": {"webchat": {"enabled": True}}, "schedules": {"jobs": [first]}}
    async with running_gateway(tmp_path, config=config) as gw:
        service = gw.app[SCHEDULES]
        await service.set_paused("brief", True)
        second = {"id": "digest", "cron": "0 17 * * 5", "task": "task: b", "to": "webchat:room"}
        changed = {**first, "task": "task: a, again"}
        reload_with(gw, tmp_path, {**config, "schedules": {"jobs": [changed, second]}})

        async def applied() -> bool:
            return {job.job_id for job in await service.list()} == {"brief", "digest"}

        async with hang_guard("the reload's jobs"):
            while not await applied():  # noqa: ASYNC110 - the reload writes in a task
                await asyncio.sleep(0.02)
        brief = (await service.get("brief")).job
        assert (brief.task, brief.paused, brief.declared) == ("task: a, again", True, True)
        reload_with(gw, tmp_path, {**config, "schedules": {"jobs": [second]}})

        async def removed() -> bool:
            return [job.job_id for job in await service.list()] == ["digest"]

        async with hang_guard("the job's removal"):
            while not await removed():  # noqa: ASYNC110 - the reload writes in a task
                await asyncio.sleep(0.02)

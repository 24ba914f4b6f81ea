"""``herald schedules …`` as real processes against a running gateway: add (a mistake names
the option), list, run, show with the occurrence, pause, resume, rm. Hostile values are one
line and a non-zero exit, never a traceback — from the CLI, and in the config file, where
``herald config check`` and ``herald run`` exit 78 naming file, line and key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from gateway.constants import EXIT_CONFIG, EXIT_UNAVAILABLE
from tests.gateway.commands._cli import cli, gateway_config, run_when
from tests.gateway.daemon_process import free_port, herald

#: A job declared in the file: listed, run now, paused and resumed, never removed.
DECLARED = {
    "id": "weekday-brief",
    "cron": "0 9 * * 1-5",
    "task": "task: brief",
    "to": "webchat:cli-client",
}


def config(tmp_path: Path, port: int) -> Path:
    return gateway_config(tmp_path, port, schedules={"jobs": [DECLARED]})


async def test_schedules_through_the_gateway(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    c = ("-c", str(path))
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, _, err = await cli(
            "schedules", "add", "--cron", "0 9 * *", "--to", "webchat:cli-client", "task: x", *c
        )
        assert code == 1
        assert "is no crontab" in err
        assert err.rstrip().endswith("(--cron)")
        code, _, err = await cli(
            "schedules", "add", "--every", "1h", "--to", "teams:x", "task: x", *c
        )
        assert code == 1
        assert "(--to)" in err

        code, out, err = await cli(
            "schedules",
            "add",
            "--every",
            "1h",
            "--id",
            "hourly",
            "--to",
            "webchat:cli-client",
            "task: hourly",
            *c,
        )
        assert code == 0, err
        assert out.startswith("added job hourly: every 1h, next run ")

        code, out, err = await cli("schedules", "list", *c)
        assert code == 0, err
        lines = out.splitlines()
        assert [line.split()[0] for line in lines] == ["hourly", "weekday-brief"]
        assert "[declared]" in lines[1]
        assert "cron 0 9 * * 1-5 (UTC)" in lines[1]

        code, out, err = await cli("schedules", "run", "hourly", *c)
        assert code == 0, err
        run_id = out.split()[-1]
        shown = await run_when(path, run_id, lambda run: run["status"] == "done")
        assert shown["jobId"] == "hourly"

        code, out, err = await cli("schedules", "show", "hourly", *c)
        assert code == 0, err
        assert f"ran run {run_id}" in out
        assert "last status" in out

        for action, word in (("pause", "paused"), ("resume", "resumed")):
            code, out, err = await cli("schedules", action, "weekday-brief", *c)
            assert code == 0, err
            assert out == f"{word} job weekday-brief\n"
        code, _, err = await cli("schedules", "rm", "weekday-brief", *c)
        assert code == 1
        assert "declared in the config file" in err
        code, out, err = await cli("schedules", "rm", "hourly", *c)
        assert (code, out) == (0, "deleted job hourly\n")
        code, _, err = await cli("schedules", "show", "hourly", *c)
        assert code == 1
        assert "no job 'hourly'" in err


async def test_hostile_values_are_one_line_never_a_traceback(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        for option, value, words in (
            ("--every", "3000000d", "'3000000d' is longer than 366d"),
            ("--at", "9999-12-31T23:59:59-14:00", "is out of the range of times"),
            ("--timezone", "America", "unknown time zone 'America'"),
            ("--timezone", "A" * 300, "at most 64 characters"),
        ):
            trigger = () if option in ("--every", "--at") else ("--cron", "0 9 * * *")
            code, out, err = await cli(
                "schedules", "add", option, value, *trigger, "--to", "webchat:cli-client",
                "task: x", "-c", str(path),
            )  # fmt: skip
            assert code == 1, err
            assert out == ""
            assert "Traceback" not in err
            assert err.count("\n") == 1, err
            assert words in err
            assert err.rstrip().endswith(f"({option})"), err


@asynccontextmanager
async def not_the_api(status: int) -> AsyncIterator[str]:
    """A loopback server answering every request ``status`` with a page, not JSON."""

    async def page(_: web.Request) -> web.Response:
        return web.Response(status=status, text="<html>500 Internal Server Error</html>")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("status", [500, 502, 200])
async def test_an_answer_that_is_not_json_is_one_line(tmp_path: Path, status: int) -> None:
    path = config(tmp_path, free_port())
    async with not_the_api(status) as url:
        for args in (
            ("add", "--every", "1h", "--to", "webchat:cli-client", "task: x"),
            ("list",),
            ("rm", "hourly"),
        ):
            code, out, err = await cli("schedules", *args, "--url", url, "-c", str(path))
            assert (code, out) == (EXIT_UNAVAILABLE, ""), err
            assert "Traceback" not in err
            assert err.count("\n") == 1, err
            assert f"the gateway at {url} answered {status} " in err
            assert err.rstrip().endswith("without a JSON body")


#: A config file whose job (line 6) has a value no trigger can take.
HOSTILE_FILE = """{{
  gateway: {{ stateDir: "{state}" }},
  channels: {{ webchat: {{ enabled: true }} }},
  schedules: {{
    jobs: [
      {{ id: "x", {key}: "{value}", task: "t", to: "webchat:abc" }},
    ],
  }},
}}
"""


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("every", "3000000d", "'3000000d' is longer than 366d"),
        ("at", "9999-12-31T23:59:59-14:00", "is out of the range of times"),
        ("cron", "0 0 30 2 *", "never fires"),
    ],
)
async def test_a_hostile_declared_job_stops_config_check_and_run_with_78(
    tmp_path: Path, key: str, value: str, words: str
) -> None:
    state = tmp_path / "state"
    path = tmp_path / "herald.json5"
    path.write_text(HOSTILE_FILE.format(state=state, key=key, value=value), encoding="utf-8")
    for command in (("config", "check"), ("run",)):
        code, _, err = await cli(*command, "-c", str(path))
        assert code == EXIT_CONFIG, err
        assert "Traceback" not in err
        assert f"{path}:6:" in err, err
        assert f"schedules.jobs[0].{key}: " in err, err
        assert words in err
    assert not state.exists()  # stopped before anything was made

"""``herald schedules …`` as real processes against a running gateway: add (a mistake names
the option), list, run, show with the occurrence, pause, resume, rm."""

from __future__ import annotations

from pathlib import Path

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

"""``herald schedules list|show|add|rm|run|pause|resume``: scheduled jobs, through the running
gateway's HTTP API (``/v1/schedules``), so the daemon owns every job and its next run.

``add`` takes the job as the config file does: ``herald schedules add --cron "0 9 * * 1-5"
--to slack:C0123456789 "Summarise yesterday's incidents."``. A mistake prints the API's
message with the option to blame, on one line, and exits 1; a gateway that cannot be
reached, or answers something else than the API's JSON, is said in one line too and exits
69 (never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any, Final

from gateway.commands.reading import CONFIG_HELP, err, safe
from gateway.commands.status import gateway_url
from gateway.constants import EXIT_UNAVAILABLE

#: The API's field names as this command's options.
_OPTIONS: Final = {
    "cron": "--cron",
    "every": "--every",
    "at": "--at",
    "timezone": "--timezone",
    "to": "--to",
    "agentId": "--agent",
    "id": "--id",
    "label": "--label",
    "model": "--model",
    "runTimeoutSeconds": "--timeout",
    "task": "TASK",
}


def _api(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    from gateway.config import load_settings

    settings = load_settings(args.config, environ=os.environ).settings
    url = (args.url or gateway_url(settings)).rstrip("/")
    token = settings.gateway.auth.token
    return url, ({"Authorization": f"Bearer {token.get_secret_value()}"} if token else {})


def _call(
    args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]] | None:
    """The API's status and JSON answer; None (after saying why, in one line) when it cannot
    be reached or answers something else than JSON."""
    import aiohttp  # here: the other commands build this module's parser, and need none

    url, headers = _api(args)

    async def send() -> tuple[int, dict[str, Any]] | None:
        async with (
            aiohttp.ClientSession(headers=headers) as http,
            http.request(method, f"{url}{path}", json=body) as response,
        ):
            try:
                data = await response.json(content_type=None)
            except ValueError:  # not JSON: a proxy's page, or not Herald at that address
                data = None
            if not isinstance(data, dict):
                what = f"{response.status} {response.reason or ''}".strip()
                err(f"the gateway at {url} answered {what} without a JSON body")
                return None
            return response.status, data

    try:
        return asyncio.run(send())
    except aiohttp.ClientError as exc:
        err(f"cannot reach the gateway at {url}: {exc}")
        return None


def _failed(status: int, data: dict[str, Any]) -> int:
    error = data.get("error")
    if not isinstance(error, dict):
        error = {}
    field = error.get("field")
    blamed = f" ({_OPTIONS.get(field, field)})" if field else ""
    err(f"{safe(str(error.get('message', status)))}{blamed}")
    return 1


def _trigger(job: dict[str, Any]) -> str:
    trigger = job.get("trigger", {})
    if "cron" in trigger:
        return f"cron {trigger['cron']} ({trigger.get('timezone', 'UTC')})"
    kind, value = next(iter(trigger.items()), ("?", "?"))
    return f"{kind} {value}"


def _line(job: dict[str, Any]) -> str:
    state = "paused" if job["paused"] else "active" if job["enabled"] else "disabled"
    declared = " [declared]" if job["declared"] else ""
    return safe(
        f"{job['id']:<28} {_trigger(job):<34} next {job.get('nextRunAt') or 'never':<26}"
        f" {state}{declared} → {job['to']}"
    )


def schedules_list(args: argparse.Namespace) -> int:
    answer = _call(args, "GET", "/v1/schedules")
    if answer is None:
        return EXIT_UNAVAILABLE
    status, data = answer
    if status != 200:
        return _failed(status, data)
    jobs = data["jobs"]
    if not jobs:
        print("no scheduled jobs")
    for job in jobs:
        print(_line(job))
    return 0


def schedules_show(args: argparse.Namespace) -> int:
    answer = _call(args, "GET", f"/v1/schedules/{args.job_id}")
    if answer is None:
        return EXIT_UNAVAILABLE
    status, job = answer
    if status != 200:
        return _failed(status, job)
    rows = [
        ("id", job["id"]),
        ("trigger", _trigger(job)),
        ("to", job["to"]),
        ("agent", job["agentId"]),
        ("task", job["task"]),
        ("next run", job.get("nextRunAt") or "never"),
        ("last run", f"{job.get('lastRunAt') or '-'} {job.get('lastRunId') or ''}".strip()),
        ("last status", job.get("lastStatus") or "-"),
        ("failures", str(job["consecutiveFailures"])),
        ("paused", "yes" if job["paused"] else "no"),
        ("declared", "yes (change it in the config file)" if job["declared"] else "no"),
    ]
    for name, value in rows:
        print(safe(f"{name:<12} {value}"))
    occurrences = job.get("occurrences") or []
    if occurrences:
        print("occurrences (newest first):")
    for item in occurrences:
        run = f" run {item['runId']}" if item.get("runId") else ""
        print(safe(f"  {item['at']}  {item['outcome']}{run}"))
    return 0


def schedules_add(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"task": args.task, "to": args.to}
    for name, key in (
        ("cron", "cron"),
        ("every", "every"),
        ("at", "at"),
        ("timezone", "timezone"),
        ("agent", "agentId"),
        ("id", "id"),
        ("label", "label"),
        ("model", "model"),
        ("timeout", "runTimeoutSeconds"),
    ):
        if getattr(args, name) is not None:
            body[key] = getattr(args, name)
    answer = _call(args, "POST", "/v1/schedules", body)
    if answer is None:
        return EXIT_UNAVAILABLE
    status, job = answer
    if status != 201:
        return _failed(status, job)
    print(safe(f"added job {job['id']}: {_trigger(job)}, next run {job.get('nextRunAt')}"))
    return 0


def _action(method: str, suffix: str, done: str) -> Any:
    def act(args: argparse.Namespace) -> int:
        answer = _call(args, method, f"/v1/schedules/{args.job_id}{suffix}")
        if answer is None:
            return EXIT_UNAVAILABLE
        status, data = answer
        if status not in (200, 202):
            return _failed(status, data)
        run = f": run {data['runId']}" if "runId" in data else ""
        print(safe(f"{done} job {args.job_id}{run}"))
        return 0

    return act


def add_commands(subparsers: Any) -> None:
    group = subparsers.add_parser("schedules", help="scheduled jobs: list, add, run, pause")
    sub = group.add_subparsers(dest="schedules_command", metavar="ACTION", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--url", help="gateway URL (default: from the config)")
        parser.add_argument("--config", "-c", help=CONFIG_HELP)

    listing = sub.add_parser("list", help="every job with its next run")
    common(listing)
    listing.set_defaults(func=schedules_list)
    for name, helptext, func in (
        ("show", "one job and its last occurrences", schedules_show),
        ("rm", "delete a job (not a declared one)", _action("DELETE", "", "deleted")),
        ("run", "start an occurrence now", _action("POST", "/run", "started")),
        ("pause", "pause a job", _action("POST", "/pause", "paused")),
        ("resume", "resume a paused job", _action("POST", "/resume", "resumed")),
    ):
        parser = sub.add_parser(name, help=helptext)
        parser.add_argument("job_id", metavar="JOB")
        common(parser)
        parser.set_defaults(func=func)
    add = sub.add_parser("add", help="create a job: one of --cron, --every, --at")
    add.add_argument("task", metavar="TASK", help="what each run is asked to do")
    add.add_argument("--to", required=True, help="chat target: slack:C0123, webchat:<id>, …")
    add.add_argument("--cron", help='five-field crontab, e.g. "0 9 * * 1-5"')
    add.add_argument("--every", help="a period: 90s, 15m, 2h, 1d")
    add.add_argument("--at", help="one time, ISO-8601 with an offset")
    add.add_argument("--timezone", help="the time zone of --cron (default: schedules.timezone)")
    add.add_argument("--agent", help="the agent that runs it (default: routing.defaultAgent)")
    add.add_argument("--id", help="the job's id (default: made from the task)")
    add.add_argument("--label", help="the runs' label")
    add.add_argument("--model", help="<provider>/<model id> for the runs")
    add.add_argument("--timeout", type=float, help="each run's timeout in seconds")
    common(add)
    add.set_defaults(func=schedules_add)

"""``herald runs list|show`` and ``herald spawn "<task>"`` (DESIGN §11).

``runs`` reads the state database read-only (safe while the daemon runs); ``runs list``
shows the runs a run spawned indented below it, with each run's ``sessions_yield`` batch.
``spawn`` goes
through the running gateway's HTTP API (``POST /v1/tools/invoke``), as DESIGN §11 says, so
the run is owned by the daemon; ``--wait`` polls ``GET /v1/runs/{id}`` until it finishes and
prints the announce.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import aiohttp
import orjson

from gateway.commands.sessions import _safe, _settings, _when, _with_db
from gateway.state import FINISHED_STATUSES, RunRecord, StateDB, StateError, StateMissingError
from gateway.subagents.presenter import (
    SHORT_ID,
    run_detail,
    run_json,
    run_name,
    run_tree,
    runtime_seconds,
    tree_name,
    usage_text,
)
from gateway.usage import format_cost, format_runtime

_CONFIG_HELP = "config file (.json5, .json or .toml); default $HERALD_CONFIG"
#: Seconds between polls of ``spawn --wait``: quick enough to feel live, light on the API.
POLL_SECONDS = 1.0


def add_commands(subparsers: Any) -> None:
    """Register ``runs`` (list, show) and ``spawn``."""
    runs = subparsers.add_parser("runs", help="list and inspect sub-agent runs")
    sub = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", required=True)
    listing = sub.add_parser(
        "list", help="list sub-agent runs, newest first, the runs they spawned below them"
    )
    listing.add_argument("--status", help="only these statuses (comma-separated)")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--config", "-c", help=_CONFIG_HELP)
    listing.set_defaults(func=runs_list)
    show = sub.add_parser("show", help="show one run")
    show.add_argument("run_id", help="run id (or a unique prefix)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--config", "-c", help=_CONFIG_HELP)
    show.set_defaults(func=runs_show)

    spawn = subparsers.add_parser("spawn", help="start a sub-agent through the running gateway")
    spawn.add_argument("task", help="what the sub-agent should do")
    spawn.add_argument("--label")
    spawn.add_argument("--agent", dest="agent_id", help="target agent id")
    spawn.add_argument("--model", help="model override, <provider>/<model id>")
    spawn.add_argument("--timeout", type=float, dest="run_timeout_seconds")
    spawn.add_argument("--cleanup", choices=("keep", "delete"))
    spawn.add_argument("--session", dest="session_key", help="requester session key")
    spawn.add_argument("--wait", action="store_true", help="wait and print the announce")
    spawn.add_argument("--url", help="gateway URL (default: from the config)")
    spawn.add_argument("--config", "-c", help=_CONFIG_HELP)
    spawn.set_defaults(func=spawn_command)


def runs_list(args: argparse.Namespace) -> int:
    statuses = [s.strip() for s in args.status.split(",")] if args.status else None

    async def query(db: StateDB) -> list[RunRecord]:
        return await db.runs.list(statuses=statuses, limit=max(1, args.limit))

    try:
        runs = _with_db(_settings(args), query)
    except StateMissingError:
        runs = []
    except StateError as exc:
        print(f"herald: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps([run_json(r) for r in runs]).decode() + "\n")
        return 0
    if not runs:
        print("no sub-agent runs")
        return 0
    ids = {run.run_id for run in runs}
    for level, run in run_tree(runs):
        name = _safe(tree_name(run, level, shown=ids))
        print(f"{run.run_id}  {run.status:<11} {_when(run.created_at)}  {name}")
    return 0


def runs_show(args: argparse.Namespace) -> int:
    async def query(db: StateDB) -> tuple[list[RunRecord], list[RunRecord]]:
        found = [r for r in await db.runs.list() if r.run_id.startswith(args.run_id)]
        if len(found) != 1:
            return found, []
        return found, await db.runs.list(parent_run_id=found[0].run_id, oldest_first=True)

    try:
        matches, children = _with_db(_settings(args), query)
    except (StateMissingError, StateError) as exc:
        print(f"herald: {exc}", file=sys.stderr)
        return 1
    if len(matches) != 1:
        what = "no run" if not matches else "more than one run"
        print(f"herald: {what} matches {args.run_id!r}", file=sys.stderr)
        return 1
    run = matches[0]
    if args.json:
        detail = run_detail(run, children).wire()  # as GET /v1/runs/{runId} answers
        sys.stdout.write(orjson.dumps(detail, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    seconds = runtime_seconds(run)
    runtime = format_runtime(seconds) if seconds is not None else "n/a"
    cost = format_cost(run.cost_usd) if run.cost_usd is not None else "n/a"
    lines = [
        f"run        {run.run_id}",
        f"status     {run.status}",
        f"name       {_safe(run_name(run))}",
        f"agent      {run.agent_id} (requested by {run.requester_agent_id})",
        f"model      {run.model}{'' if run.model_applied else ' (override ignored)'}",
        f"created    {_when(run.created_at)}",
        f"runtime    {runtime}",
        f"tokens     {usage_text(run)}",
        f"cost       {cost}",
        f"depth      {run.depth}"
        + (f" (spawned by run {run.parent_run_id})" if run.parent_run_id else ""),
        f"batch      {run.batch_id or '-'}",
        f"session    {run.child_session_key}",
        f"transcript {run.transcript_path}",
        f"announce   {run.announce_state or '-'}"
        + (f" ({_safe(run.announce_error)})" if run.announce_error else ""),
    ]
    if run.error:
        lines.append(f"error      {_safe(run.error)}")
    for n, child in enumerate(children):
        title = "children" if n == 0 else ""
        brief = f"{child.run_id[:SHORT_ID]} {child.status:<11} {_safe(run_name(child))}"
        lines.append(f"{title:<10} {brief}")
    print("\n".join(lines))
    return 0


def spawn_command(args: argparse.Namespace) -> int:
    from gateway.config import load_settings

    settings = load_settings(args.config, environ=os.environ).settings
    host = settings.gateway.host
    url = args.url or f"http://{'[' + host + ']' if ':' in host else host}:{settings.gateway.port}"
    token = settings.gateway.auth.token
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
    spawn_args: dict[str, Any] = {"task": args.task}
    for name, key in (
        ("label", "label"),
        ("agent_id", "agentId"),
        ("model", "model"),
        ("run_timeout_seconds", "runTimeoutSeconds"),
        ("cleanup", "cleanup"),
    ):
        if getattr(args, name) is not None:
            spawn_args[key] = getattr(args, name)
    body: dict[str, Any] = {"tool": "sessions_spawn", "args": spawn_args}
    if args.session_key:
        body["sessionKey"] = args.session_key
    try:
        return asyncio.run(_spawn(url.rstrip("/"), headers, body, wait=args.wait))
    except aiohttp.ClientError as exc:
        print(f"herald: cannot reach the gateway at {url}: {exc}", file=sys.stderr)
        return 69  # EX_UNAVAILABLE


async def _spawn(url: str, headers: dict[str, str], body: dict[str, Any], *, wait: bool) -> int:
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{url}/v1/tools/invoke", json=body) as response:
            data = await response.json(content_type=None)
        if response.status != 200:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            field = f" ({error['field']})" if error.get("field") else ""
            print(f"herald: {error.get('message', response.status)}{field}", file=sys.stderr)
            return 1
        result = data["result"]
        if result.get("status") != "accepted":
            print(f"herald: spawn {result.get('status')}: {result.get('error')}", file=sys.stderr)
            return 1
        print(f"accepted run {result['runId']} ({result['childSessionKey']})")
        if result.get("warning"):
            print(f"warning: {result['warning']}")
        if not wait:
            return 0
        while True:
            async with http.get(f"{url}/v1/runs/{result['runId']}") as response:
                run = await response.json()
            if run["status"] in FINISHED_STATUSES:
                break
            await asyncio.sleep(POLL_SECONDS)
        print(f"status: {run['status']}")
        if run["announce"]["text"]:
            print(run["announce"]["text"])
        return 0 if run["status"] == "done" else 1

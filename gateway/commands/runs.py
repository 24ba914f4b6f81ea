"""``herald runs list|show|abort`` and ``herald spawn "<task>"``.

``runs list`` and ``runs show`` read the state database read-only (safe while the daemon
runs); ``runs list`` shows the runs a run spawned indented below it, with each run's
``sessions_yield`` batch. ``runs show`` gives the run's transcript where it is now (after
its session was archived, the renamed file, and when).

``spawn`` and ``runs abort`` go through the running gateway's HTTP API
(``POST /v1/tools/invoke``, ``POST /v1/runs/{id}/abort``), so the run is owned by the
daemon. ``spawn`` says where the run's result will go: the chat of the requester session
(``--session``), the chat a chat target names (``--to slack:C0123``: that chat's own
session), or nowhere when the session has no chat — the default agent's main session, used
without either, has none. ``--wait`` polls ``GET /v1/runs/{id}``
until the run is final and prints its result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from gateway.commands.reading import (
    CONFIG_HELP,
    StateSource,
    err,
    origin_text,
    safe,
    state_source,
    when,
    with_db,
)
from gateway.commands.status import gateway_url
from gateway.sessions import Location, is_uuid, location_of
from gateway.shapes import Run
from gateway.state import (
    FINISHED_STATUSES,
    RUN_STATUSES,
    RunRecord,
    StateDB,
    StateError,
    StateMissingError,
)
from gateway.subagents.presenter import (
    SHORT_ID,
    announce_state,
    run_detail,
    run_name,
    run_tree,
    run_view,
    runtime_seconds,
    tree_name,
    usage_text,
)
from gateway.usage import format_cost, format_runtime

if TYPE_CHECKING:  # aiohttp is imported by the commands that call the gateway, when they do
    import aiohttp

#: Seconds between polls of ``spawn --wait``: quick enough to feel live, light on the API.
POLL_SECONDS = 1.0
V = TypeVar("V", bound=Run)
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
_HEADER = f"{'RUN':<36}  {'STATUS':<11} {'CREATED (UTC)':<16}  NAME"
#: Where a field's further lines start in ``runs show``.
_INDENT = "\n" + " " * 11


def add_commands(subparsers: Any) -> None:
    """Register ``runs`` (list, show, abort) and ``spawn``."""
    runs = subparsers.add_parser("runs", help="list, inspect and abort sub-agent runs")
    sub = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", required=True)
    listing = sub.add_parser(
        "list", help="list sub-agent runs, newest first, the runs they spawned below them"
    )
    listing.add_argument(
        "--status", help=f"only these statuses, comma-separated: {', '.join(RUN_STATUSES)}"
    )
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--config", "-c", help=CONFIG_HELP)
    listing.set_defaults(func=runs_list)
    show = sub.add_parser("show", help="show one run")
    show.add_argument("run_id", help="run id (or a unique prefix)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--config", "-c", help=CONFIG_HELP)
    show.set_defaults(func=runs_show)
    abort = sub.add_parser(
        "abort", help="stop a run and every run it spawned (through the running gateway)"
    )
    abort.add_argument("run_id", help="run id (or a unique prefix)")
    abort.add_argument("--url", help="gateway URL (default: from the config)")
    abort.add_argument("--config", "-c", help=CONFIG_HELP)
    abort.set_defaults(func=runs_abort)

    spawn = subparsers.add_parser(
        "spawn",
        help="start a sub-agent through the running gateway",
        description="Start a sub-agent through the running gateway. Its result is announced "
        "to the chat a chat target names (--to) or to the chat of the requester session "
        "(--session); without either the requester is the default agent's main session, "
        "which has no chat: the result is then kept on the run (herald runs show) and "
        "printed by --wait.",
    )
    spawn.add_argument("task", help="what the sub-agent should do")
    spawn.add_argument("--label")
    spawn.add_argument("--agent", dest="agent_id", help="target agent id")
    spawn.add_argument("--model", help="model override, <provider>/<model id>")
    spawn.add_argument("--timeout", type=float, dest="run_timeout_seconds")
    spawn.add_argument("--cleanup", choices=("keep", "delete"))
    requester = spawn.add_mutually_exclusive_group()
    requester.add_argument(
        "--to",
        dest="target",
        metavar="TARGET",
        help="chat target: the result is announced there, and the chat's own session is the "
        "requester (slack:C0123[/<thread ts>], discord:<channel id>, webchat:<clientId>)",
    )
    requester.add_argument(
        "--session",
        dest="session_key",
        help="requester session key: the result is announced to its chat and thread "
        "(e.g. agent:main:slack:channel:c0123); default: the main session, no chat",
    )
    spawn.add_argument("--wait", action="store_true", help="wait for the run; print its result")
    spawn.add_argument("--url", help="gateway URL (default: from the config)")
    spawn.add_argument("--config", "-c", help=CONFIG_HELP)
    spawn.set_defaults(func=spawn_command)


# -- reading ------------------------------------------------------------------------------------


def runs_list(args: argparse.Namespace) -> int:
    """``herald runs list [--status S,…] [--limit N] [--json]``."""
    statuses = [s.strip() for s in args.status.split(",")] if args.status else None
    unknown = [s for s in statuses or () if s not in RUN_STATUSES]
    if unknown:
        err(f"--status: unknown status {unknown[0]!r}; valid: {', '.join(RUN_STATUSES)}")
        return EXIT_USAGE
    source = state_source(args)

    async def query(db: StateDB) -> tuple[list[RunRecord], dict[str, Location]]:
        runs = await db.runs.list(statuses=statuses, limit=max(1, args.limit))
        return runs, await _locations(source, db, runs) if args.json else {}

    try:
        runs, located = with_db(source, query)
    except StateMissingError:
        runs, located = [], {}
    except StateError as exc:
        err(str(exc))
        return 1
    if args.json:
        views = [_located(run_view(r), located.get(r.run_id)).wire() for r in runs]
        sys.stdout.write(orjson.dumps(views).decode() + "\n")
        return 0
    print(source.heading())
    if not runs:
        print("No sub-agent runs.")
        return 0
    print(_HEADER)
    ids = {run.run_id for run in runs}
    for level, run in run_tree(runs):
        name = safe(tree_name(run, level, shown=ids))
        progress = run.progress
        print(f"{run.run_id:<36}  {progress.status:<11} {when(progress.created_at):<16}  {name}")
    return 0


def runs_show(args: argparse.Namespace) -> int:
    """``herald runs show <run> [--json]``."""
    source = state_source(args)

    async def query(db: StateDB) -> tuple[list[RunRecord], list[RunRecord], Location | None]:
        found = await _matching(db, args.run_id)
        if len(found) != 1:
            return found, [], None
        run = found[0]
        children = await db.runs.list(parent_run_id=run.run_id, oldest_first=True)
        return found, children, (await _locations(source, db, [run])).get(run.run_id)

    try:
        matches, children, location = with_db(source, query)
    except StateMissingError:
        err(f"no run matches {args.run_id!r}: no state database {source.where()}")
        return 1
    except StateError as exc:
        err(str(exc))
        return 1
    if len(matches) != 1:
        what = "no run" if not matches else "more than one run"
        err(f"{what} matches {args.run_id!r} {source.where()}")
        return 1
    run = matches[0]
    if args.json:
        detail = _located(run_detail(run, children), location).wire()  # as the API answers
        sys.stdout.write(orjson.dumps(detail, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print("\n".join(_show_lines(run, children, location)))
    return 0


def _show_lines(run: RunRecord, children: list[RunRecord], where: Location | None) -> list[str]:
    request, progress = run.request, run.progress
    seconds = runtime_seconds(run)
    runtime = format_runtime(seconds) if seconds is not None else "n/a"
    cost = format_cost(progress.cost_usd) if progress.cost_usd is not None else "n/a"
    transcript = (where.path if where is not None else progress.transcript_path) or "(gone)"
    origin = origin_text(request.origin) if request.origin else "none: the announce goes to no chat"
    lines = [
        f"run        {run.run_id}",
        f"status     {progress.status}",
        f"name       {safe(run_name(run))}",
        f"task       {_block(request.task)}",
        f"agent      {request.agent_id} (requested by {request.requester_agent_id})",
        f"requester  {request.parent_session_key or '-'}",
        f"origin     {safe(origin)}",
        f"model      {request.model}{'' if request.model_applied else ' (override ignored)'}",
        f"created    {when(progress.created_at)}",
        f"runtime    {runtime}",
        f"tokens     {usage_text(run)}",
        f"cost       {cost}",
        f"depth      {request.depth}"
        + (f" (spawned by run {request.parent_run_id})" if request.parent_run_id else ""),
        f"batch      {run.delivery.batch_id or '-'}",
        f"delivery   {run.delivery.state}",
        f"session    {run.child_session_key}",
        f"transcript {safe(str(transcript))}",
    ]
    if where is not None and where.archived_at is not None:
        lines.append(f"archived   at {where.archived_at}")
    lines.append(
        f"announce   {announce_state(run) or '-'}"
        + (f" ({safe(run.delivery.announce_error)})" if run.delivery.announce_error else "")
    )
    lines.append(f"result     {_block(progress.result_text) if progress.result_text else '-'}")
    if progress.error:
        lines.append(f"error      {_block(progress.error)}")
    for n, child in enumerate(children):
        title = "children" if n == 0 else ""
        brief = f"{child.run_id[:SHORT_ID]} {child.progress.status:<11} {safe(run_name(child))}"
        lines.append(f"{title:<10} {brief}")
    return lines


def _block(text: str) -> str:
    """Text of several lines, its later lines indented under the first."""
    return safe(text.rstrip("\n")).replace("\n", _INDENT)


async def _matching(db: StateDB, prefix: str) -> list[RunRecord]:
    """The run ``prefix`` names: the run with that id, else every run whose id starts so."""
    if is_uuid(prefix):
        run = await db.runs.get(prefix)
        return [run] if run is not None else []
    return [r for r in await db.runs.list() if r.run_id.startswith(prefix)]


async def _locations(
    source: StateSource, db: StateDB, runs: list[RunRecord]
) -> dict[str, Location]:
    """Where each run's transcript is now, by run id (runs without a session row left out)."""
    sessions = await db.sessions.get_many([r.child_session_key for r in runs])
    return {
        r.run_id: location_of(source.state_dir, sessions[r.child_session_key], r.run_id)
        for r in runs
        if r.child_session_key in sessions
    }


def _located(view: V, where: Location | None) -> V:
    """``view`` with the transcript where it is now and when its session was archived."""
    if where is None:
        return view
    path = str(where.path) if where.path is not None else None
    return view.model_copy(update={"transcript_path": path, "archived_at": where.archived_at})


# -- through the gateway ------------------------------------------------------------------------


def _api(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The gateway's base URL and auth headers, from ``--url`` and the configuration."""
    from gateway.config import load_settings

    settings = load_settings(args.config, environ=os.environ).settings
    url = (args.url or gateway_url(settings)).rstrip("/")
    token = settings.gateway.auth.token
    return url, ({"Authorization": f"Bearer {token.get_secret_value()}"} if token else {})


def runs_abort(args: argparse.Namespace) -> int:
    """``herald runs abort <run>``: ``POST /v1/runs/{id}/abort`` on the running gateway."""
    run_id: str = args.run_id
    if not is_uuid(run_id):  # a prefix: the state database knows which run it names
        source = state_source(args)
        try:
            matches = with_db(source, lambda db: _matching(db, run_id))
        except StateError as exc:
            err(f"cannot resolve run {run_id!r} {source.where()}: {exc}")
            return 1
        if len(matches) != 1:
            what = "no run" if not matches else "more than one run"
            err(f"{what} matches {run_id!r} {source.where()}")
            return 1
        run_id = matches[0].run_id
    import aiohttp

    url, headers = _api(args)
    try:
        return asyncio.run(_abort(url, headers, run_id))
    except aiohttp.ClientError as exc:
        err(f"cannot reach the gateway at {url}: {exc}")
        return EXIT_UNAVAILABLE


async def _abort(url: str, headers: dict[str, str], run_id: str) -> int:
    import aiohttp

    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(f"{url}/v1/runs/{run_id}/abort") as response,
    ):
        data = await response.json(content_type=None)
    if response.status == 202:
        print(f"aborted run {run_id} ({data['status']}); the runs it spawned are stopped too")
        return 0
    error = data.get("error", {}) if isinstance(data, dict) else {}
    if response.status == 409:
        # One line, once: the API's message repeats the run id ("run … already finished
        # (done)"); its status is the part worth keeping.
        ended = re.search(r"\((\w+)\)\s*$", str(error.get("message", "")))
        status = f" ({ended.group(1)})" if ended else ""
        err(f"run {run_id} has already finished{status}; nothing to abort")
    elif response.status == 404:
        err(f"the gateway at {url} has no run {run_id}")
    else:
        err(f"abort failed ({response.status}): {error.get('message', '')}")
    return 1


def spawn_command(args: argparse.Namespace) -> int:
    """``herald spawn "<task>" [--session KEY] [--wait] …``."""
    import aiohttp

    url, headers = _api(args)
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
    if args.target:
        body["to"] = args.target
    try:
        return asyncio.run(_spawn(url, headers, body, wait=args.wait))
    except aiohttp.ClientError as exc:
        err(f"cannot reach the gateway at {url}: {exc}")
        return EXIT_UNAVAILABLE


async def _spawn(url: str, headers: dict[str, str], body: dict[str, Any], *, wait: bool) -> int:
    import aiohttp

    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{url}/v1/tools/invoke", json=body) as response:
            data = await response.json(content_type=None)
        if response.status != 200:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            field = f" ({error['field']})" if error.get("field") else ""
            err(f"{error.get('message', response.status)}{field}")
            return 1
        result = data["result"]
        if result.get("status") != "accepted":
            err(f"spawn {result.get('status')}: {result.get('error')}")
            return 1
        run_id = result["runId"]
        print(f"accepted run {run_id} ({result['childSessionKey']})")
        if result.get("warning"):
            print(f"warning: {result['warning']}")
        run = await _get_run(http, url, run_id)
        given = "sessionKey" in body or "to" in body
        print(_destination(run, wait=wait, session_given=given))
        while wait and run["status"] not in FINISHED_STATUSES:
            await asyncio.sleep(POLL_SECONDS)
            run = await _get_run(http, url, run_id)
    if not wait:
        return 0
    print(f"status: {run['status']}")
    if run.get("result"):
        print(safe(run["result"]))
    if run.get("error"):
        print(f"error: {safe(run['error'])}")
    return 0 if run["status"] == "done" else 1


async def _get_run(http: aiohttp.ClientSession, url: str, run_id: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/runs/{run_id}") as response:
        response.raise_for_status()
        run: dict[str, Any] = await response.json()
        return run


def _destination(run: dict[str, Any], *, wait: bool, session_given: bool) -> str:
    """Where the run's result goes, in one line."""
    requester = run.get("parentSessionKey") or "-"
    origin = run.get("origin")
    if origin:
        thread = f" thread {origin['threadId']}" if origin.get("threadId") else ""
        where = f"{origin['channel']} chat {origin['chatId']}{thread}"
        return safe(f"result: announced to {where} (session {requester})")
    why = (
        f"session {requester} has no chat"
        if session_given
        else f"no --session: the requester is {requester}, which has no chat"
    )
    later = "printed below when it ends" if wait else f"see `herald runs show {run['runId']}`"
    return safe(f"result: posted to no chat ({why}); {later}")

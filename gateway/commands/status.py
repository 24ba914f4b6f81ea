"""``herald status``: is the gateway up, and what is it doing.

The pid comes from the state directory's lock (held by a running ``herald run``), readiness
and channels (``connected``, or in a cluster ``standby``: another replica holds its
connection) from ``GET /readyz``, lane depths and runs from ``GET /metrics`` — the same
figures an operator would scrape. Exit status: 0 running and ready, 1 running but not ready
or not answering, 3 not running (as ``systemctl status``), 4 the gateway wants a token this
command was not given (``/readyz`` needs none, ``/metrics`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from gateway import instance
from gateway.instance import REPLICAS_DIR, lock_path

if TYPE_CHECKING:
    from gateway.settings import HeraldSettings

#: How long each probe may take: a gateway that does not answer in this time is reported so.
PROBE_SECONDS = 5.0
EXIT_NOT_READY = 1
EXIT_NOT_RUNNING = 3
EXIT_NO_TOKEN = 4
#: What to do when the gateway refuses the token (or its absence).
TOKEN_HINT = (
    "the gateway wants its token: set HERALD_GATEWAY__AUTH__TOKEN (or the variable the "
    "config's gateway.auth.token names, such as HERALD_TOKEN) in this shell, or run "
    "with --config naming the gateway's config"
)


@dataclass
class Status:
    config: str
    state_dir: str
    url: str
    pid: int | None = None
    answering: bool = False
    ready: bool = False
    error: str | None = None
    #: The gateway answered 401: this command has no token, or another one.
    unauthorized: bool = False
    channels: dict[str, bool] = field(default_factory=dict)
    #: connected, standby (another replica holds its connection) or disconnected.
    channel_states: dict[str, str] = field(default_factory=dict)
    lanes: dict[str, dict[str, int]] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.pid is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "pid": self.pid,
            "ready": self.ready,
            "answering": self.answering,
            "error": self.error,
            "config": self.config,
            "stateDir": self.state_dir,
            "url": self.url,
            "channels": self.channels,
            "channelStates": self.channel_states,
            "lanes": self.lanes,
            "runs": self.runs,
        }


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="is the gateway running, and what is it doing")
    parser.add_argument("--config", "-c", help="config file (default: the usual lookup)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=status_command)


def gateway_url(settings: HeraldSettings) -> str:
    """The gateway's own base URL, from its listening address."""
    host = settings.gateway.host
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    shown = "::1" if shown == "::" else shown
    return f"http://{'[' + shown + ']' if ':' in shown else shown}:{settings.gateway.port}"


def gateway_pid(settings: HeraldSettings) -> int | None:
    """The pid of the gateway on the configured state directory: in a cluster, the replica
    ``cluster.replicaId`` names (without one, any replica of this state directory)."""
    state_dir = settings.gateway.resolved_state_dir()
    if settings.cluster.database_url is None:
        return lock_holder(state_dir)
    if settings.cluster.replica_id is not None:
        from gateway.sessions.keys import normalize_id

        name = normalize_id(settings.cluster.replica_id, exact=True)
        return lock_holder(lock_path(state_dir, name))
    for path in sorted((state_dir / REPLICAS_DIR).glob("*.lock")):
        if (pid := lock_holder(path)) is not None:
            return pid
    return None


def lock_holder(lock: Path) -> int | None:
    """The pid of the gateway holding the lock file ``lock`` (or, for a directory, the
    state directory's lock in it), or None when none runs."""
    found = instance.holder(lock)
    return found.pid if found is not None else None


def status_command(args: argparse.Namespace) -> int:
    from gateway.config import load_settings

    loaded = load_settings(args.config, environ=os.environ)
    settings = loaded.settings
    state = Status(
        config=str(loaded.path) if loaded.path else "embedded defaults",
        state_dir=str(settings.gateway.resolved_state_dir()),
        url=gateway_url(settings),
    )
    state.pid = gateway_pid(settings)
    if state.running:
        token = settings.gateway.auth.token
        headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
        asyncio.run(_probe(state, headers))
    if args.json:
        sys.stdout.write(orjson.dumps(state.to_json(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(render(state))
    if not state.running:
        return EXIT_NOT_RUNNING
    if state.unauthorized:
        return EXIT_NO_TOKEN
    return 0 if state.ready else EXIT_NOT_READY


async def _probe(state: Status, headers: dict[str, str]) -> None:
    # aiohttp (and prometheus_client below) only where used: the other commands build this
    # module's parser and import gateway_url from it, and should not pay for either.
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=PROBE_SECONDS)
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
            async with http.get(f"{state.url}/readyz") as response:
                body = await response.json(content_type=None)
                state.answering = True
                state.ready = response.status == 200
                state.channels = {str(k): bool(v) for k, v in body.get("channels", {}).items()}
                states = body.get("channelStates", {})
                state.channel_states = {str(k): str(v) for k, v in states.items()}
            async with http.get(f"{state.url}/metrics") as response:
                if response.status == 200:
                    read_metrics(state, await response.text())
                elif response.status == 401:
                    state.unauthorized = True
                    state.error = TOKEN_HINT
                else:
                    state.error = f"/metrics answered {response.status}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        state.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def read_metrics(state: Status, text: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    lanes: dict[str, dict[str, int]] = defaultdict(dict)
    with contextlib.suppress(ValueError):
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in ("herald_lane_active", "herald_lane_queued"):
                    kind = sample.name.removeprefix("herald_lane_")
                    lanes[sample.labels["lane"]][kind] = int(sample.value)
                elif sample.name == "herald_runs":
                    state.runs[sample.labels["status"]] = int(sample.value)
    state.lanes = dict(lanes)


def _channel_state(state: Status, name: str, up: bool) -> str:
    shown = state.channel_states.get(name)
    if shown == "standby":  # a cluster: another replica holds the connection
        return "standby (another replica holds its connection)"
    return "connected" if up else "not connected"


def render(state: Status) -> str:
    if not state.running:
        head = "herald: not running"
    elif not state.answering:
        head = f"herald: running (pid {state.pid}), not answering at {state.url}"
    else:
        head = f"herald: running (pid {state.pid}), {'ready' if state.ready else 'starting'}"
    lines = [head, f"config     {state.config}", f"state dir  {state.state_dir}"]
    if state.running:
        lines.append(f"url        {state.url}/")
    if state.error:
        lines.append(f"error      {state.error}")
    if state.channels:
        shown = ", ".join(
            f"{name} {_channel_state(state, name, up)}"
            for name, up in sorted(state.channels.items())
        )
        lines.append(f"channels   {shown}")
    if state.lanes:
        shown = "; ".join(
            f"{lane} {depth.get('active', 0)} active / {depth.get('queued', 0)} queued"
            for lane, depth in sorted(state.lanes.items())
        )
        lines.append(f"lanes      {shown}")
    if state.runs:
        live = ("queued", "running", "announcing")
        shown = ", ".join(f"{state.runs.get(s, 0)} {s}" for s in live)
        lines.append(f"runs       {shown} ({sum(state.runs.values())} recorded)")
    return "\n".join(lines)

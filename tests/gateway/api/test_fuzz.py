"""Bad input: the API fuzzed with schemathesis against its own ``/openapi.json``.

The gateway under fuzzing is the app the daemon builds (scripted provider, temp state
directory, web chat off), served on loopback by a process of its own: schemathesis' client
is blocking, and Hypothesis seeds the global ``random`` module around each example, which a
gateway sharing the process would draw from too. Every operation gets a bounded number of
generated requests, valid and invalid (``MAX_EXAMPLES`` of each), some aimed at a run and
sessions that exist so that 200 answers meet the schemas too. Checks: no 5xx, and every
status, content type, header and body as the document says; once with a token configured
(and sent), once without one. Beside the fuzzing: hostile bodies get a 4xx in the API's
error shape, and every protected route answers 401 without the token while the public ones
do not.
"""

from __future__ import annotations

import functools
import io
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.api.openapi import ERROR_CODES
from gateway.api.routes import openapi_document
from tests.gateway.api.test_openapi import TOKEN, channel_owned, daemon_app, serve, served

#: Generated requests per operation and generation mode: enough to reach every branch of a
#: handler's validation, small enough that the whole file stays well under a minute.
MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
#: Guard against a hung gateway; never an assertion about speed.
HANG_GUARD_SECONDS = 30
#: Tools that would reach outside the test (network, processes); the fuzzer may name them.
DENIED_TOOLS = ["group:web", "exec"]
REPO = Path(__file__).resolve().parents[3]
#: The child process: ``daemon_app`` served until SIGTERM (which runs its cleanup).
SERVER = """
import json, sys
from pathlib import Path
from aiohttp import web
from tests.gateway.api.test_openapi import daemon_app
tmp, token, config, port = sys.argv[1:]
app = daemon_app(Path(tmp), token=token or None, config=json.loads(config))
web.run_app(app, host="127.0.0.1", port=int(port), print=None)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class ServedGateway:
    """``daemon_app`` served by a child process on 127.0.0.1."""

    tmp_path: Path
    token: str | None
    config: dict[str, Any]
    url: str = ""
    known: dict[str, list[str]] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def log(self) -> str:
        return (self.tmp_path / "server.log").read_text(errors="replace")

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [self.tmp_path, self.token or "", json.dumps(self.config), port]
        with (self.tmp_path / "server.log").open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", SERVER, *map(str, argv)],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        with requests.Session() as session:
            while self._process.poll() is None and time.monotonic() < deadline:
                try:
                    if session.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                        return
                except requests.ConnectionError:
                    time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the gateway did not start:\n{self.log}")

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(HANG_GUARD_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def seed(self) -> None:
        """A finished run (with its child session) for path parameters that exist."""
        with requests.Session() as session:
            answer = session.post(
                f"{self.url}/v1/tools/invoke",
                json={"tool": "sessions_spawn", "args": {"task": "task: seed"}},
                headers=self.headers,
            ).json()
            run_id = answer["result"]["runId"]
            deadline = time.monotonic() + HANG_GUARD_SECONDS
            while time.monotonic() < deadline:
                run = session.get(f"{self.url}/v1/runs/{run_id}", headers=self.headers).json()
                if run["status"] == "done":
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"the seed run did not finish: {run}")
        self.known = {
            "runId": [run_id],
            # No channel runs here, so no job can be created: the job routes answer 404.
            "jobId": ["no-such-job"],
            "sessionKey": ["agent:main:main", run["childSessionKey"], "agent%3Amain%3Amain"],
        }


@pytest.fixture(scope="module", params=["token", "open"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedGateway]:
    """A served gateway, with a token configured (and sent) or none."""
    served_gateway = ServedGateway(
        tmp_path_factory.mktemp(f"fuzz-{request.param}"),
        token=TOKEN if request.param == "token" else None,
        config={"agent": {"tools": {"deny": DENIED_TOOLS}}},
    )
    served_gateway.start()
    try:
        served_gateway.seed()
        yield served_gateway
    finally:
        served_gateway.stop()


SCHEMA = schemathesis.openapi.from_dict(openapi_document())
OPERATIONS = [
    (method.upper(), path) for path, item in openapi_document()["paths"].items() for method in item
]


#: Tools a fuzzed invoke names (random names only ever meet 404), with arguments that are
#: sometimes valid; exec and web_fetch are denied by the config, so they answer 403.
TOOLS = (
    "sessions_list",
    "sessions_history",
    "sessions_send",
    "sessions_spawn",
    "agents_list",
    "read",
    "write",
    "edit",
    "ls",
    "exec",
    "web_fetch",
    "submit_result",
)
ARG_NAMES = (
    "task", "label", "agentId", "model", "runTimeoutSeconds", "cleanup", "sessionKey", "limit",
    "includeTools", "includeSubagents", "message", "path", "content", "oldText", "newText",
    "command", "url", "result",
)  # fmt: skip
VALID_ARGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sessions_list", {}),
    ("sessions_list", {"includeSubagents": True}),
    ("agents_list", {}),
    ("sessions_history", {"sessionKey": "agent:main:main", "limit": 5}),
    ("sessions_spawn", {"task": "task: fuzz", "label": "fz", "cleanup": "delete"}),
    ("ls", {"path": "."}),
    ("write", {"path": "notes/fuzz.txt", "content": "x"}),
    ("read", {"path": "notes/fuzz.txt"}),
    ("read", {"path": "../outside"}),
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _invoke_bodies(known: dict[str, list[str]]) -> st.SearchStrategy[dict[str, Any]]:
    valid = st.sampled_from(VALID_ARGS).map(lambda pair: {"tool": pair[0], "args": pair[1]})
    named = st.fixed_dictionaries(
        {
            "tool": st.sampled_from(TOOLS),
            "args": st.dictionaries(st.sampled_from(ARG_NAMES), JSON_VALUES, max_size=4),
        }
    )
    keyed = st.tuples(valid | named, st.sampled_from(known["sessionKey"][:2])).map(
        lambda pair: {**pair[0], "sessionKey": pair[1]}
    )
    return valid | named | keyed


def _cases_at(operation: Any, mode: GenerationMode, params: dict[str, str]) -> Any:
    return operation.as_strategy(generation_mode=mode, path_parameters=params)


def _strategy(operation: Any, known: dict[str, list[str]]) -> Any:
    """Schemathesis' own cases, valid and invalid, plus cases aimed at what exists."""
    names = [p["name"] for p in operation.definition.raw.get("parameters", []) if p["in"] == "path"]
    strategies = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        strategies.append(operation.as_strategy(generation_mode=mode))
        if names:
            fixed = st.fixed_dictionaries({n: st.sampled_from(known[n]) for n in names})
            strategies.append(fixed.flatmap(functools.partial(_cases_at, operation, mode)))
    if operation.path == "/v1/tools/invoke":
        bodies = _invoke_bodies(known)
        strategies.append(bodies.flatmap(lambda body: operation.as_strategy(body=body)))
    return st.one_of(strategies)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_fuzzed_requests_get_documented_answers_and_never_a_5xx(
    gateway: ServedGateway, method: str, path: str
) -> None:
    headers = gateway.headers
    operation = SCHEMA[path][method]

    with requests.Session() as session:
        # Two generation modes share the budget; how fast cases generate depends on the
        # schema, not on the code under test, so Hypothesis' speed checks do not apply.
        @settings(
            max_examples=MAX_EXAMPLES * 2,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=_strategy(operation, gateway.known))
        def fuzz(case: Any) -> None:
            response = case.call(base_url=gateway.url, session=session, headers=headers)
            case.validate_response(response, checks=CHECKS, headers=headers)

        fuzz()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/tools/invoke", b""),
        ("POST", "/v1/tools/invoke", b"\xff\xfe{"),
        ("POST", "/v1/tools/invoke", b"[]"),
        ("POST", "/v1/tools/invoke", b'{"tool": "sessions_list", "args": {"limit": 1e999}}'),
        ("POST", "/v1/tools/invoke", b"[" * 100_000),
        ("POST", "/v1/tools/invoke", b'{"tool": ' * 50_000),
        ("POST", "/v1/tools/invoke", b" " * (2 * 1024 * 1024)),
        ("GET", "/v1/nowhere", b""),
        ("POST", "/v1/runs", b""),
    ],
    ids=[
        "empty",
        "not-utf8",
        "not-an-object",
        "huge-number",
        "deep-array",
        "deep-object",
        "2MiB",
        "no-route",
        "wrong-method",
    ],
)
async def test_hostile_requests_get_a_4xx_in_the_error_shape(
    tmp_path: Path, method: str, path: str, body: bytes
) -> None:
    async with serve(daemon_app(tmp_path)) as client:
        # A BytesIO: aiohttp warns about sending megabytes of raw bytes in one piece.
        response = await client.request(
            method, path, data=io.BytesIO(body), headers={"Content-Type": "application/json"}
        )
        assert 400 <= response.status < 500, response.status
        assert response.content_type == "application/json"
        error = (await response.json())["error"]
        assert error["code"] in ERROR_CODES
        assert error["message"]


async def test_every_protected_route_needs_the_token_and_public_ones_do_not(
    tmp_path: Path,
) -> None:
    app = daemon_app(tmp_path, token=TOKEN, config={"channels": {"webchat": {"enabled": True}}})
    routes = sorted(served(app))
    public = {"/healthz", "/readyz", "/"}
    async with serve(app) as client:
        for method, path in routes:
            url = path.replace("{runId}", "r1").replace("{sessionKey}", "agent:main:main")
            response = await client.request(method, url, json={})
            if path in public or path.startswith("/static/"):
                assert response.status < 400, (method, path, response.status)
                continue
            assert response.status == 401, (method, path)
            assert (await response.json())["error"]["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"] == 'Bearer realm="herald"'
            wrong = await client.request(
                method, url, json={}, headers={"Authorization": "Bearer nope"}
            )
            assert wrong.status == 401, (method, path)
            # A token in a REST URL is refused (only the WebSocket handshake takes one).
            query = await client.request(method, f"{url}?token={TOKEN}", json={})
            assert query.status == 401, (method, path)
    assert {path for _, path in routes if channel_owned(path)}  # the web chat's were tried

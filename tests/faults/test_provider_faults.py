"""Providers that fail at a set rate: 429, 500, garbage bodies and hangs, under interleaved runs.

The model is the wire-level OpenAI fake answering by request content (runs interleave, so a
fixed queue of answers cannot work). Whether a request fails, and how, is drawn from a
``Random`` seeded with (seed, the request's last user message, how many times that message
was asked before), so the same seed gives the same faults whatever the interleaving.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from gateway.state import Origin
from tests.fakes.openai import FakeOpenAI, Step, openai_server
from tests.faults._support import (
    audit_transcripts,
    chat_context,
    duplicates,
    fault_seed,
    spawn_runs,
    wait_final,
)
from tests.gateway.harness import running_gateway

RUNS = 30
#: Share of model requests that fail. With ``maxRetries: 2`` a call fails for good when all
#: three attempts fail (or at once on a garbage body), so some runs end in ``error`` and some
#: announce turns fall back to the system announce, and most runs still succeed.
FAULT_RATE = 0.35
FAULTS = ("429", "500", "garbage", "hang")
#: Seconds before a hung request times out (and is retried).
PROVIDER_TIMEOUT = 0.2
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
GUARD_SECONDS = 40.0


class FaultyModel:
    """A responder for :class:`FakeOpenAI`: a valid completion, or a fault at a set rate."""

    def __init__(self, fake: FakeOpenAI, seed: int, rate: float) -> None:
        self.fake = fake
        self.seed = seed
        self.rate = rate
        self.injected: Counter[str] = Counter()
        self._asked: Counter[str] = Counter()

    def __call__(self, body: Any) -> Step:
        messages = body["messages"]
        users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
        last = users[-1]
        attempt = self._asked[last]
        self._asked[last] += 1
        rng = random.Random(f"{self.seed}:{last}:{attempt}")
        if rng.random() < self.rate:
            fault = rng.choice(FAULTS)
            self.injected[fault] += 1
            if fault == "429":
                return self.fake.error_step(429, "Rate limit reached", retry_after_ms=5)
            if fault == "500":
                return self.fake.error_step(500, "The server had an error")
            if fault == "garbage":
                return self.fake.garbage_step()
            return self.fake.hang_step()
        if last.startswith("[announce]"):
            return self.fake.text_step(f"ANNOUNCE {users[0]}")
        return self.fake.text_step(f"done {last}")


async def test_runs_survive_providers_failing_at_a_set_rate(tmp_path: Path) -> None:
    seed = fault_seed(9101)
    async with openai_server() as fake:
        model = FaultyModel(fake, seed, FAULT_RATE)
        fake.responder = model
        config = {
            # Every run comes from one chat session, faster than they finish.
            "agent": {
                "model": "fake/m",
                "subagents": {"maxConcurrent": 4, "maxChildrenPerSession": RUNS},
            },
            "models": {
                "providers": {
                    "fake": {
                        "api": "openai-completions",
                        "baseUrl": fake.base_url,
                        "apiKey": fake.api_key,
                        "models": [{"id": "m"}],
                        "maxRetries": 2,
                        "timeoutSeconds": PROVIDER_TIMEOUT,
                    }
                }
            },
        }
        async with running_gateway(tmp_path, config=config) as gw:
            ctx = await chat_context(gw, ORIGIN)
            tasks = [f"task-{n:02d}" for n in range(RUNS)]
            run_ids = await spawn_runs(gw, ctx, tasks)
            await wait_final(gw, run_ids, GUARD_SECONDS)
            deliveries = [await gw.delivery(run_id) for run_id in run_ids]
            runs = [await gw.db.runs.get(run_id) for run_id in run_ids]
            announces = [m for m in gw.channel.sent if m.kind == "announce"]

    # The faults really happened, of every kind (else this test proves nothing).
    assert set(model.injected) == set(FAULTS), model.injected
    assert all(run is not None for run in runs)
    statuses = Counter(run.progress.status for run in runs if run is not None)
    assert set(statuses) <= {"done", "error"}, statuses
    assert statuses["done"] > 0, statuses
    assert statuses["error"] > 0, f"no run failed: raise FAULT_RATE ({statuses})"
    # Exactly one announce per run, delivered; error runs say so in their first line.
    per_run = Counter(m.run_id for m in announces)
    assert duplicates(per_run) == {}
    assert set(per_run) == set(run_ids)
    assert {d.state for d in deliveries} == {"delivered"}
    texts = {m.run_id: m.text for m in announces}
    for run in runs:
        assert run is not None
        assert run.delivery.announce_state == "delivered", run
        if run.progress.status == "error":
            assert texts[run.run_id].startswith(f'Sub-agent "{run.request.label}" failed'), run
            assert "fake/m" in (run.progress.error or ""), run
        else:
            assert f"done {run.request.task}" == run.progress.result_text, run
    audit = audit_transcripts(tmp_path / "state")
    assert audit.files >= RUNS + 1
    assert audit.invalid == []
    assert audit.torn == []
    assert audit.headless == []

"""The demo model's comparison story, end to end: ``compare the history of tea and coffee``
spawns two sub-agents and yields, the children answer offline, and one follow-up reply
quotes both results above the batch's stats line.

The gateway runs with the demo script exactly as ``make run`` reads it
(``config/demo-script.json5``); the follow-up rules are also checked against the text the
gateway really gives the follow-up turn, with one result missing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyjson5

from gateway.llm import ChatMessage, ModelRequest
from gateway.providers.scripted import ScriptedProvider, load_script
from gateway.state import BatchRecord, RunProgress, RunRecord, RunRequest
from gateway.subagents.completions import followup_text
from tests.gateway.harness import running_gateway

DEMO = Path(__file__).parents[2] / "config" / "demo-script.json5"
ASK = "compare the history of tea and coffee"
STATS = re.compile(
    r"^Stats: 2 sub-agents \(2 done\) • runtime \d+s • tokens [\d.]+k? \(in [\d.]+k? /"
    r" out [\d.]+k?\) • est \$[\d.]+ • runs (?P<runs>[0-9a-f]{8}, [0-9a-f]{8})$"
)


def demo_script() -> dict[str, Any]:
    data = pyjson5.loads(DEMO.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def history(topic: str) -> str:
    return (
        f"{topic} in brief: where it was first grown and drunk, how trade carried it around "
        "the world, and how people enjoy it today. (A placeholder from the scripted demo "
        "model; a real model would write the history.)"
    )


async def test_compare_spawns_two_sub_agents_and_answers_once_with_both_results(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, script=demo_script()) as gw:
        await gw.say(ASK, thread_id="t1")
        first, followup = await gw.wait_sent(lambda m: m.kind == "reply", count=2)
        assert first.text == (
            "Two sub-agents are looking into tea and coffee in parallel. I'll compare what "
            "they find as soon as both are done."
        )
        body, _, stats = followup.text.rpartition("\n\n")
        assert body == (
            "Both sub-agents are done. Here they are side by side:\n\n"
            f"**tea**: {history('tea')}\n\n**coffee**: {history('coffee')}\n\n"
            "(A real model would now weigh the two against each other; the demo model "
            "quotes them.)"
        )
        assert followup.thread_id == "t1"
        match = STATS.fullmatch(stats)
        assert match, stats
        runs = await gw.db.runs.list(oldest_first=True)
        assert [run.request.label for run in runs] == ["tea", "coffee"]
        assert [run.request.task for run in runs] == [
            "Write a short history of tea",
            "Write a short history of coffee",
        ]
        assert match["runs"] == ", ".join(run.run_id[:8] for run in runs)
        assert len({run.delivery.batch_id for run in runs}) == 1
        assert runs[0].delivery.batch_id is not None
        # One combined answer: the runs post nothing of their own.
        await gw.runs_idle()
        assert [m.kind for m in gw.channel.sent] == ["reply", "reply"]


def run(n: int, label: str, **fields: Any) -> RunRecord:
    return RunRecord(
        run_id=f"run-{n}",
        child_session_key=f"agent:main:subagent:{n}",
        child_session_id=f"s{n}",
        request=RunRequest(
            requester_agent_id="main",
            agent_id="main",
            task=f"Write a short history of {label}",
            label=label,
        ),
        progress=RunProgress(created_at=float(n)),
    ).with_columns(**fields)


async def test_a_follow_up_missing_a_result_quotes_what_came_back_under_its_own_label() -> None:
    batch = BatchRecord(
        batch_id="b-1",
        session_key="agent:main:main",
        run_ids=("run-1", "run-2"),
        first_spawn_at=0,
        created_at=0,
        deadline_at=60,
    )
    runs = [
        run(1, "tea", status="timeout", error="timed out after 30s"),
        run(2, "coffee", status="done", result_text=history("coffee")),
    ]
    demo = ScriptedProvider("demo", load_script(DEMO))
    message = ChatMessage(role="user", content=followup_text(batch, runs))
    reply = await demo.complete(ModelRequest(model="demo/scripted", system="", messages=(message,)))
    assert reply.text == (
        "Only one result came back, so this is not a full comparison yet:\n\n"
        f"**coffee**: {history('coffee')}\n\n"
        "The runs panel shows what happened to the others."
    )
    failed = [run(1, "tea", status="error", error="boom"), run(2, "coffee", status="error")]
    message = ChatMessage(role="user", content=followup_text(batch, failed))
    reply = await demo.complete(ModelRequest(model="demo/scripted", system="", messages=(message,)))
    assert reply.text.startswith("None of the sub-agents came back with a result")

"""Smoke tests of the gateway benchmarks: each runs at a tiny size and returns well-formed
rows. Speed is what the benchmarks report, never what a test asserts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as collector
from bench import (
    batches,
    cluster,
    fanin,
    file_tools,
    mcp,
    mcp_results,
    queued,
    sandbox,
    schedules,
    sessions,
    spawn,
    sse,
    streaming,
    transcript_reads,
    turns,
)
from bench._common import COLUMNS

KEYS = set(COLUMNS)


def check_rows(rows: list[dict[str, Any]], count: int, *, memory: tuple[str, ...] = ()) -> None:
    assert len(rows) == count
    for row in rows:
        assert set(row) == KEYS
        assert isinstance(row["figure"], str)
        assert row["figure"]
        assert isinstance(row["goal"], str)
        for column in ("herald", "baseline", "ratio"):
            value = row[column]
            assert isinstance(value, float)
            assert math.isfinite(value) or column == "ratio"
            # RSS growth of a few dozen runs can round to whole pages, even to zero.
            if not any(word in row["figure"] for word in memory):
                assert value > 0, row


def test_mcp_rows() -> None:
    rows = mcp.run(turns=1, rounds=1)
    check_rows(rows, 2)
    assert rows[0]["figure"].startswith("MCP call in a turn")


def test_mcp_results_rows() -> None:
    rows = mcp_results.run(calls=1, sizes=(2, 4, 8))
    check_rows(rows, 8)
    assert rows[0]["figure"] == "2 MiB MCP result vs bare client (s)"
    assert rows[-2]["figure"].startswith("/healthz p99 during 8 MiB calls")


def test_turns_rows() -> None:
    rows = turns.run(6, turns_per_chat=3, rounds=1)
    check_rows(rows, 4)
    assert "6 runs, 4 model calls, 3× agents_list" in rows[0]["figure"]
    assert "6 runs, 4 model calls, 3× ls" in rows[2]["figure"]


def test_streaming_rows() -> None:
    rows = streaming.run(turns=4, rounds=1)
    check_rows(rows, 5)
    figures = " ".join(row["figure"] for row in rows)
    for part in ("first delta frame ms p50", "p99", "streamed vs whole", "delta frames per"):
        assert part in figures
    assert rows[4]["herald"] >= 1  # every streamed reply had its text shown before it


def test_spawn_rows() -> None:
    rows = spawn.run(calls=30, clients=4, queued=40, subagents=6, width=2)
    check_rows(rows, 6, memory=("RSS",))
    figures = " ".join(row["figure"] for row in rows)
    for part in ("p50", "p99", "RSS", "tracemalloc", "runs per second", "CPU ms per run"):
        assert part in figures


def test_schedules_rows() -> None:
    rows = schedules.run(jobs=60, minutes=0.05)
    check_rows(rows, 6, memory=("RSS", "CPU"))
    assert rows[0]["figure"] == "due to run recorded, p50 (60 jobs/min, ms)"


def test_sandbox_rows() -> None:
    rows = sandbox.run(**sandbox.QUICK)
    check_rows(rows, 2)
    assert "exec true: ms per call, bwrap vs off" in rows[0]["figure"]
    assert rows[1]["goal"] == "<= 20 ms added"


def test_queued_rows() -> None:
    rows = queued.run(**queued.QUICK)
    check_rows(rows, 6, memory=("RSS",))
    assert "enqueue µs per run (100 queued)" in rows[0]["figure"]
    assert "bytes RSS per queued run (400 queued)" in rows[3]["figure"]
    assert "400 queued vs 100" in rows[4]["figure"]
    assert rows[4]["goal"] == rows[5]["goal"] == "ratio <= 1.5"


@pytest.mark.slow
@pytest.mark.postgres
def test_cluster_rows() -> None:
    # Real replicas on a PostgreSQL server of the benchmark's own; the quick run leaves out
    # the failover part (it waits out the cluster's default timeouts, half a minute each).
    rows = cluster.run(**cluster.QUICK)
    check_rows(rows, 7, memory=("run again",))  # none may have been run again
    figures = [row["figure"] for row in rows]
    assert figures[0] == "runs/s, 2 replicas vs 1 (16 runs, model 0.2 s, width 8 each)"
    assert "CPU ms per run, replicas + PostgreSQL, 2 replicas vs 1" in figures[1]
    assert "CPU ms per run, 2 replicas + PostgreSQL vs one process on SQLite" in figures[2]
    assert rows[2]["goal"] == "ratio <= 3"
    assert "state writes run again (a conflict, a condemned group) vs kept" in figures[3]
    assert rows[3]["baseline"] > 0  # the replicas' /metrics were read: they kept writes
    assert "spawn accept p50 ms, PostgreSQL vs SQLite (200 calls, 8 clients)" in figures[4]
    assert "spawn accept p99 ms, PostgreSQL vs SQLite (200 calls, 8 clients)" in figures[5]
    assert figures[6] == "runs/s, 2 replicas vs 1 (8 runs, model 1 s, width 8 each)"


def test_fanin_rows() -> None:
    rows = fanin.run(**fanin.QUICK)
    check_rows(rows, 3)
    assert "fan-in ms, last child's end to follow-up sent" in rows[0]["figure"]
    assert "(3 batches of 10, width 8)" in rows[0]["figure"]
    assert rows[0]["goal"] == "ratio <= 1.5"
    assert "plain chat turn" in rows[1]["figure"]
    assert "in one chat after 3 batches" in rows[2]["figure"]


def test_batches_rows() -> None:
    rows = batches.run(**batches.QUICK)
    check_rows(rows, 2)
    assert "runs per second, yielded batches vs plain announces" in rows[0]["figure"]
    assert "CPU ms per run, yielded batches vs plain announces" in rows[1]["figure"]
    assert "(20 batches of 5, width 8)" in rows[1]["figure"]


def test_sessions_rows() -> None:
    rows = sessions.run(**sessions.QUICK)
    check_rows(rows, 5, memory=("turns whole", "refused"))  # counts that should be 0
    assert "CPU ms per turn at 50 turns vs 10" in rows[0]["figure"]
    assert "mode off" in rows[1]["figure"]
    assert "model calls per turn vs one (40 turns, 4,096-token window" in rows[2]["figure"]


def test_file_tools_rows() -> None:
    rows = file_tools.run(**file_tools.QUICK)
    check_rows(rows, 4)
    figures = " ".join(row["figure"] for row in rows)
    for part in ("read CPU", "write CPU", "openat2", "walk"):
        assert part in figures


def test_transcript_reads_rows() -> None:
    rows = transcript_reads.run(**transcript_reads.QUICK)
    check_rows(rows, 4)
    assert "peak RSS MiB during limit=1 reads vs idle (24 MiB transcript" in rows[0]["figure"]


def test_sse_rows() -> None:
    rows = sse.run(**sse.QUICK)
    check_rows(rows, 8)
    figures = [row["figure"] for row in rows]
    assert figures[0] == "4 MiB event, call CPU (s) vs old reader"
    assert figures[2] == "4 MiB event, /healthz p99 (ms) vs old reader"
    assert figures[-1] == "8 MiB event refused, /healthz p99 (ms) vs old reader"


def test_collector_writes_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "latest.md"
    assert collector.main(["--quick", "--only", "turns", "--output", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    assert "| figure | Herald | baseline | ratio | goal |" in text
    assert "| turns: CPU ms per run (40 runs" in text
    assert "turns: wall ms per run" in capsys.readouterr().out  # the combined table


def test_collector_refuses_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert collector.main(["--only", "no-such-bench"]) == 2
    assert "unknown benchmark 'no-such-bench'" in capsys.readouterr().err


def test_collector_finds_every_module() -> None:
    names = collector.bench_names()
    expected = {"lanes", "turns", "spawn", "fanin", "batches", "sessions", "queued", "cluster"}
    assert expected | {"transcript_reads"} <= set(names)
    assert not [n for n in names if n.startswith("_")]
    assert "soak" not in names

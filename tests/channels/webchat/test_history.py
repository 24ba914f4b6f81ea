"""The web chat's history files: a page sees its conversation after a restart."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.base import OutboundMessage, RunUpdate
from channels.webchat import WebchatChannel, WebchatConfig
from channels.webchat.history import COMPACT_FACTOR, HistoryFiles, file_name
from channels.webchat.protocol import CLIENT_ID_PATTERN


def announce(client: str, text: str, run_id: str = "run-1") -> OutboundMessage:
    return OutboundMessage(
        channel="webchat", account="local", chat_id=client, thread_id=None, text=text,
        kind="announce", run_id=run_id,
    )  # fmt: skip


def frames(channel: WebchatChannel, client: str) -> list[dict[str, object]]:
    state = channel._clients.get(client)
    return [orjson.loads(f) for f in [*state.history, *state.runs.values()]]


async def test_messages_and_run_statuses_survive_a_new_channel(tmp_path: Path) -> None:
    first = WebchatChannel(WebchatConfig(), history_dir=tmp_path / "webchat")
    sent = await first.send(announce("client-1", "the result"))
    await first.run_update(RunUpdate("run-1", "research", "running", "client-1"))
    await first.run_update(RunUpdate("run-1", "research", "done", "client-1"))
    await first.stop()

    second = WebchatChannel(WebchatConfig(), history_dir=tmp_path / "webchat")
    kept = frames(second, "client-1")
    assert [(f["type"], f.get("text"), f.get("status")) for f in kept] == [
        ("message", "the result", None),
        ("run", None, "done"),
    ]
    assert kept[0]["id"] == sent.message_ids[0]
    path = tmp_path / "webchat" / "client-1.jsonl"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700


async def test_without_a_directory_nothing_is_written(tmp_path: Path) -> None:
    channel = WebchatChannel(WebchatConfig())
    await channel.send(announce("client-1", "x"))
    assert list(tmp_path.iterdir()) == []


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    files = HistoryFiles(tmp_path, history_size=10, runs_kept=10)
    good = orjson.dumps({"type": "message", "text": "kept", "id": "a"}).decode()
    (tmp_path / "c1.jsonl").write_text(good + "\n" + '{"type": "mess', encoding="utf-8")
    assert files.load("c1").messages == [good]


def test_only_the_last_history_size_messages_are_loaded(tmp_path: Path) -> None:
    files = HistoryFiles(tmp_path, history_size=3, runs_kept=2)
    for n in range(5):
        files.append("c1", orjson.dumps({"type": "message", "id": str(n)}).decode())
    for run in ("r1", "r2", "r3"):
        files.append("c1", orjson.dumps({"type": "run", "runId": run}).decode())
    loaded = files.load("c1")
    assert [orjson.loads(m)["id"] for m in loaded.messages] == ["2", "3", "4"]
    assert list(loaded.runs) == ["r2", "r3"]


def message(message_id: str) -> str:
    return orjson.dumps({"type": "message", "id": message_id}).decode()


def run(run_id: str, status: str) -> str:
    return orjson.dumps({"type": "run", "runId": run_id, "status": status}).decode()


def test_a_grown_file_is_compacted_to_what_is_kept(tmp_path: Path) -> None:
    files = HistoryFiles(tmp_path, history_size=2, runs_kept=1)
    limit = COMPACT_FACTOR * (2 + 1)
    frames = [message(f"m{n}") for n in range(limit - 2)] + [run("r1", "a"), run("r2", "b")]
    for frame in frames:
        files.append("c1", frame)
    files.append("c1", message("last"))
    lines = (tmp_path / "c1.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == [
        message(f"m{limit - 4}"),
        message(f"m{limit - 3}"),
        run("r2", "b"),
        message("last"),
    ]


def test_a_compaction_keeps_what_another_replica_appended(tmp_path: Path) -> None:
    """Two gateways share the directory (a cluster): one compacting the file must keep
    the lines the other wrote, which it never had in memory."""
    mine = HistoryFiles(tmp_path, history_size=2, runs_kept=1)
    theirs = HistoryFiles(tmp_path, history_size=2, runs_kept=1)
    limit = COMPACT_FACTOR * (2 + 1)
    for n in range(limit):
        mine.append("c1", message(f"m{n}"))
    theirs.append("c1", message("theirs"))
    mine.append("c1", message("after"))
    lines = (tmp_path / "c1.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == [message(f"m{limit - 1}"), message("theirs"), message("after")]


@pytest.mark.parametrize("client", ["../x", "a/b", "", "x" * 65, "a\nb"])
def test_hostile_client_ids_never_become_paths(tmp_path: Path, client: str) -> None:
    files = HistoryFiles(tmp_path, history_size=2, runs_kept=1)
    with pytest.raises(ValueError, match="not a web chat client id"):
        files.load(client)


SAFE_NAME = r"[a-z0-9][a-z0-9_-]{0,63}"


@given(st.from_regex(CLIENT_ID_PATTERN, fullmatch=True))
def test_every_client_id_gets_a_safe_lowercase_file_name(client: str) -> None:
    name = file_name(client)
    assert CLIENT_ID_PATTERN.fullmatch(name)
    assert name == name.lower()
    assert name[0] not in "_-"
    assert len(name) <= 64


def test_lowercase_ids_are_their_own_names_and_ids_differing_in_case_never_share_one() -> None:
    # The page makes lowercase uuids: their files keep their names.
    page_id = "0b7c3f9e-5a1d-4c2e-9f80-1a2b3c4d5e6f"
    assert file_name(page_id) == page_id
    clients = ["ab", "Ab", "aB", "AB", "-ab", "_ab", "A" * 64, "a" * 64]
    names = [file_name(client) for client in clients]
    # Distinct even on a filesystem that ignores case.
    assert len({name.casefold() for name in names}) == len(clients)


def test_a_client_id_equal_to_another_clients_file_name_gets_a_file_of_its_own() -> None:
    hashed = file_name("VictimBrowserId42")
    assert hashed != "VictimBrowserId42"
    assert file_name(hashed) != hashed
    assert file_name("a" * 40 + "-0123456789abcdef") != "a" * 40 + "-0123456789abcdef"


def test_clients_differing_in_case_keep_separate_histories(tmp_path: Path) -> None:
    files = HistoryFiles(tmp_path, history_size=10, runs_kept=10)
    for client in ("Ab", "aB"):
        files.append(client, orjson.dumps({"type": "message", "id": client}).decode())
    for client in ("Ab", "aB"):
        loaded = files.load(client)
        assert [orjson.loads(m)["id"] for m in loaded.messages] == [client]
    assert len({p.name.casefold() for p in tmp_path.glob("*.jsonl")}) == 2

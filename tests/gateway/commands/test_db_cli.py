"""``herald db status|migrate`` on both backends, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.constants import EXIT_UNAVAILABLE
from gateway.state.schema import LATEST_VERSION


def _config(tmp_path: Path, database_url: str | None) -> str:
    data: dict[str, object] = {"gateway": {"stateDir": str(tmp_path / "state")}}
    if database_url is not None:
        data["cluster"] = {"databaseUrl": database_url}
    path = tmp_path / "herald.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_status_then_migrate_then_status(
    tmp_path: Path, database_url: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, database_url)
    assert main(["db", "status", "--config", config]) == 1  # nothing applied yet
    before = capsys.readouterr().out
    assert ("postgresql" if database_url else "sqlite") in before.splitlines()[0]
    assert main(["db", "status", "--json", "--config", config]) == 1
    pending = json.loads(capsys.readouterr().out)
    assert pending["pending"] == list(range(1, LATEST_VERSION + 1))

    assert main(["db", "migrate", "--config", config]) == 0
    assert f"to {LATEST_VERSION}" in capsys.readouterr().out
    assert main(["db", "status", "--json", "--config", config]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["version"], status["pending"]) == (LATEST_VERSION, [])
    expected = database_url.split("?")[0] if database_url else str(tmp_path / "state")
    assert status["database"].startswith(expected)

    assert main(["db", "migrate", "--config", config]) == 0
    assert "nothing to migrate" in capsys.readouterr().out


def test_an_unreachable_database_exits_69_with_the_password_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://herald:pw-cli-secret@127.0.0.1:1/herald"
    config = _config(tmp_path, url)
    assert main(["db", "status", "--config", config]) == EXIT_UNAVAILABLE
    assert main(["db", "migrate", "--config", config]) == EXIT_UNAVAILABLE
    captured = capsys.readouterr()
    assert "pw-cli-secret" not in captured.out + captured.err
    assert "postgresql://herald:********@127.0.0.1:1/herald" in captured.err


@pytest.mark.postgres
def test_the_cluster_example_migrates_a_real_database(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    example = Path(__file__).resolve().parents[3] / "config" / "cluster.json5"
    monkeypatch.setenv("HERALD_DATABASE_URL", pg_url)
    assert main(["db", "migrate", "--config", str(example)]) == 0
    assert main(["db", "status", "--config", str(example)]) == 0
    out = capsys.readouterr().out
    assert "backend   postgresql" in out
    assert f"version {LATEST_VERSION} (current)" in out

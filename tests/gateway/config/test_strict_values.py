"""Values a config file may mean only one way: booleans are booleans, a replica's name is a
name whatever the database, and a context window is a figure some model could have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config import load_settings
from gateway.errors import ConfigError


def _load(tmp_path: Path, data: dict[str, Any]) -> None:
    path = tmp_path / "herald.json"
    path.write_text(json.dumps(data))
    load_settings(path, environ={})


def _issue_keys(tmp_path: Path, data: dict[str, Any]) -> list[str | None]:
    with pytest.raises(ConfigError) as error:
        _load(tmp_path, data)
    return [issue.key for issue in error.value.issues]


@pytest.mark.parametrize("value", ["yes", 1, "true", "on", 0])
def test_a_boolean_setting_takes_only_true_or_false(tmp_path: Path, value: object) -> None:
    access = {"agent": {"tools": {"webFetch": {"allowPrivateNetworks": value}}}}
    assert _issue_keys(tmp_path, access) == ["agent.tools.webFetch.allowPrivateNetworks"]
    chat = {"channels": {"webchat": {"enabled": value}}}
    assert _issue_keys(tmp_path, chat) == ["channels.webchat.enabled"]


def test_booleans_still_load(tmp_path: Path) -> None:
    _load(tmp_path, {"agent": {"tools": {"webFetch": {"allowPrivateNetworks": True}}}})


@pytest.mark.parametrize("replica", ["a\x00b", "../etc", "a/../b", "-x", "", "a" * 65, "é"])
def test_a_replica_id_is_checked_without_a_database_url_too(tmp_path: Path, replica: str) -> None:
    assert _issue_keys(tmp_path, {"cluster": {"replicaId": replica}}) == ["cluster.replicaId"]


def test_a_hostname_like_replica_id_loads(tmp_path: Path) -> None:
    _load(tmp_path, {"cluster": {"replicaId": "web-1.example.org"}})


@pytest.mark.parametrize("window", [1e18, 10**12, 10**8 + 1])
def test_a_context_window_has_an_upper_bound(tmp_path: Path, window: float) -> None:
    model = {"id": "m", "contextWindow": window}
    models = {"models": {"providers": {"demo": {"api": "scripted", "models": [model]}}}}
    assert _issue_keys(tmp_path, models) == ["models.providers.demo.models[0].contextWindow"]

"""The ``cluster`` section: a PostgreSQL URL whose password never shows, and the replica's
name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gateway.config import load_settings, render_settings
from gateway.errors import ConfigError
from gateway.logs import SecretRedactor

URL = "postgresql://herald:pw%2Fsecret-1@db.example:5432/herald?sslmode=require"


def _file(tmp_path: Path, cluster: dict[str, object]) -> Path:
    path = tmp_path / "herald.json"
    path.write_text(json.dumps({"cluster": cluster}))
    return path


def test_defaults_are_one_process_on_sqlite(tmp_path: Path) -> None:
    cluster = load_settings(_file(tmp_path, {}), environ={}).settings.cluster
    assert cluster.database_url is None
    assert cluster.resolved_replica_id().endswith(f"-{os.getpid()}")


def test_config_show_masks_only_the_password(tmp_path: Path) -> None:
    loaded = load_settings(_file(tmp_path, {"databaseUrl": URL, "replicaId": "r1"}), environ={})
    for fmt in ("json5", "json", "toml"):
        text = render_settings(loaded, fmt)
        assert "postgresql://herald:********@db.example:5432/herald?sslmode=require" in text
        assert "secret-1" not in text
    assert loaded.settings.cluster.resolved_replica_id() == "r1"


def test_the_password_is_masked_in_logs_as_written_and_decoded(tmp_path: Path) -> None:
    settings = load_settings(_file(tmp_path, {"databaseUrl": URL}), environ={}).settings
    redactor = SecretRedactor()
    redactor.set_secrets(settings.secret_values())
    line = redactor.redact(f"connecting with pw%2Fsecret-1 (pw/secret-1) to {URL}")
    assert "secret-1" not in line
    assert "db.example" in line  # the rest of the URL stays readable


def test_the_url_can_come_from_the_environment(tmp_path: Path) -> None:
    environ = {"HERALD_CLUSTER__DATABASEURL": "postgres://h@localhost/herald"}
    settings = load_settings(_file(tmp_path, {}), environ=environ).settings
    assert settings.cluster.database_url is not None
    assert settings.cluster.database_url.get_secret_value() == "postgres://h@localhost/herald"


def test_a_url_that_is_not_postgresql_is_an_error_without_its_value(tmp_path: Path) -> None:
    path = _file(tmp_path, {"databaseUrl": "mysql://root:pw-mysql-secret@db/herald"})
    with pytest.raises(ConfigError) as error:
        load_settings(path, environ={})
    text = str(error.value)
    assert "cluster.databaseUrl" in text
    assert "PostgreSQL URL" in text
    assert "pw-mysql-secret" not in text

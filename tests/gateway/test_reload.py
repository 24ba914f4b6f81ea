"""SettingsHolder: a reload applies a valid file and tells its listeners; a bad file is
refused and the running configuration stays; a broken listener stops no other."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import load_settings
from gateway.logs import REDACTED, REDACTOR
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from tests.gateway.harness import merge

Changes = list[tuple[HeraldSettings, HeraldSettings]]
WriteConfig = Callable[..., None]


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return tmp_path / "herald.json"


@pytest.fixture
def write_config(config_path: Path, tmp_path: Path) -> WriteConfig:
    def write(**sections: Any) -> None:
        data = merge({"gateway": {"stateDir": str(tmp_path / "state")}}, sections)
        config_path.write_text(json.dumps(data))

    return write


@pytest.fixture
def holder(config_path: Path, write_config: WriteConfig) -> Iterator[SettingsHolder]:
    write_config(agent={"maxConcurrent": 2})
    settings = load_settings(config_path, environ={}).settings
    yield SettingsHolder(settings, path=str(config_path), environ={})
    REDACTOR.set_secrets(())  # a holder sets the process-wide masking: leave none behind


def recorder() -> tuple[Changes, Callable[[HeraldSettings, HeraldSettings], None]]:
    changes: Changes = []

    def listen(old: HeraldSettings, new: HeraldSettings) -> None:
        changes.append((old, new))

    return changes, listen


def test_a_valid_file_is_applied_and_listeners_hear_old_and_new(
    holder: SettingsHolder, write_config: WriteConfig
) -> None:
    before = holder.current
    changes, listen = recorder()
    holder.subscribe(listen)
    write_config(agent={"maxConcurrent": 7})
    assert holder.reload() is True
    assert holder.current.agent.max_concurrent == 7
    assert changes == [(before, holder.current)]


def test_a_bad_file_is_refused_and_the_running_configuration_stays(
    holder: SettingsHolder,
    config_path: Path,
    write_config: WriteConfig,
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = holder.current
    changes, listen = recorder()
    holder.subscribe(listen)
    for broken in ("{ agent: { maxConcurrent: ", json.dumps({"agent": {"maxConcurrent": -1}})):
        config_path.write_text(broken)
        with caplog.at_level(logging.ERROR, logger="gateway.reload"):
            assert holder.reload() is False
        assert holder.current is before
    assert changes == []
    refusals = [r for r in caplog.records if r.name == "gateway.reload"]
    assert [r.getMessage() for r in refusals] == [
        "config reload refused; keeping the running configuration"
    ] * 2
    assert "maxConcurrent" in str(refusals[1].__dict__["issues"])
    write_config(agent={"maxConcurrent": 3})  # fixed again: the next reload applies
    assert holder.reload() is True
    assert len(changes) == 1


def test_a_broken_listener_stops_neither_the_others_nor_the_reload(
    holder: SettingsHolder, write_config: WriteConfig, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(old: HeraldSettings, new: HeraldSettings) -> None:
        raise RuntimeError("listener bug")

    changes, listen = recorder()
    holder.subscribe(broken)
    holder.subscribe(listen)
    write_config(agent={"maxConcurrent": 5})
    with caplog.at_level(logging.ERROR, logger="gateway.reload"):
        assert holder.reload() is True
    assert len(changes) == 1
    assert holder.current.agent.max_concurrent == 5
    assert any(r.getMessage() == "config reload listener failed" for r in caplog.records)


def test_an_unsubscribed_listener_hears_no_more(
    holder: SettingsHolder, write_config: WriteConfig
) -> None:
    changes, listen = recorder()
    holder.subscribe(listen)
    holder.unsubscribe(listen)
    holder.unsubscribe(listen)  # not subscribed any more: a no-op
    write_config(agent={"maxConcurrent": 5})
    assert holder.reload() is True
    assert changes == []


def test_keys_bound_at_start_are_applied_with_a_warning_that_they_need_a_restart(
    holder: SettingsHolder, write_config: WriteConfig, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(agent={"maxConcurrent": 2}, gateway={"port": 9999})
    with caplog.at_level(logging.WARNING, logger="gateway.reload"):
        assert holder.reload() is True
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == "config reload: these keys change only on restart"
    assert warning.__dict__["keys"] == ["gateway.port"]
    assert holder.current.gateway.port == 9999


def test_herald_s_own_mcp_endpoint_changes_only_on_restart(
    holder: SettingsHolder, write_config: WriteConfig, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(mcp={"serve": {"enabled": True, "path": "/tools/mcp"}})
    with caplog.at_level(logging.WARNING, logger="gateway.reload"):
        assert holder.reload() is True
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.__dict__["keys"] == ["mcp.serve"]


def test_a_reloaded_secret_is_masked_from_then_on(
    holder: SettingsHolder, write_config: WriteConfig
) -> None:
    write_config(gateway={"auth": {"token": "reloaded-token-123"}})
    assert REDACTOR.redact("Bearer reloaded-token-123") == "Bearer reloaded-token-123"
    assert holder.reload() is True
    assert REDACTOR.redact("Bearer reloaded-token-123") == f"Bearer {REDACTED}"

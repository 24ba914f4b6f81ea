"""The example configs, and ``render_settings`` (what ``herald config show`` prints)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

import pyjson5
import pytest
from pydantic import BaseModel

from gateway.config import MASK, LoadedSettings, load_settings, render_settings
from gateway.config._schema import model_class, unwrap
from gateway.settings import HeraldSettings

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
JSON5_EXAMPLE = CONFIG_DIR / "herald.json5"
TOML_EXAMPLE = CONFIG_DIR / "herald.toml"

EXAMPLE_UNSET = {
    "gateway.auth.token",
    "models.providers.openai.apiKey",
    "models.providers.anthropic.apiKey",
    "channels.slack.botToken",
    "channels.slack.appToken",
    "channels.slack.signingSecret",
    "channels.discord.token",
}

Format = Literal["json5", "json", "toml"]


def test_both_examples_load_with_no_environment_to_the_same_settings() -> None:
    from_json5 = load_settings(JSON5_EXAMPLE, environ={})
    from_toml = load_settings(TOML_EXAMPLE, environ={})
    assert from_json5.settings == from_toml.settings
    assert from_json5.unset_secrets == from_toml.unset_secrets == EXAMPLE_UNSET
    assert from_json5.config_dir == from_toml.config_dir == CONFIG_DIR


def test_the_json5_example_runs_the_offline_demo() -> None:
    settings = load_settings(JSON5_EXAMPLE, environ={}).settings
    assert settings.agent.model == "demo/scripted"
    assert settings.gateway.is_loopback
    assert settings.channels.webchat.enabled
    assert not settings.channels.slack.enabled
    assert not settings.channels.discord.enabled
    demo = settings.models.providers["demo"]
    assert (demo.api, demo.script) == ("scripted", "demo-script.json5")
    assert [m.id for m in demo.models] == ["scripted"]
    assert demo.models[0].cost is not None
    assert {"openai", "anthropic"} <= set(settings.models.providers)
    for provider in ("openai", "anthropic"):
        assert all(m.cost is not None for m in settings.models.providers[provider].models)


def _schema_keys(model: type[BaseModel], value: Any, prefix: str) -> list[str]:
    """Dotted schema keys missing from ``value`` (the example's parsed data)."""
    missing: list[str] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        where = f"{prefix}{key}"
        if not isinstance(value, dict) or key not in value:
            missing.append(where)
            continue
        inner, _ = unwrap(info.annotation)
        child = value[key]
        if (sub := model_class(inner)) is not None:
            missing += _schema_keys(sub, child, f"{where}.")
        elif isinstance(child, dict) and getattr(inner, "__origin__", None) is dict:
            item = model_class(inner.__args__[1])
            for item_key, item_value in child.items():
                if item is not None:
                    missing += _schema_keys(item, item_value, f"{where}.{item_key}.")
        elif isinstance(child, list) and getattr(inner, "__origin__", None) is list:
            item = model_class(inner.__args__[0])
            for index, item_value in enumerate(child):
                if item is not None:
                    missing += _schema_keys(item, item_value, f"{where}[{index}].")
    return missing


def test_the_json5_example_spells_out_every_key_of_the_schema() -> None:
    data = pyjson5.decode(JSON5_EXAMPLE.read_text(encoding="utf-8"))
    assert _schema_keys(HeraldSettings, data, "") == []


def test_the_toml_example_is_plain_toml() -> None:
    data = tomllib.loads(TOML_EXAMPLE.read_text(encoding="utf-8"))
    assert set(data) == {"gateway", "agent", "routing", "models", "channels"}


# --- render_settings ----------------------------------------------------------------------

SECRET_ENV = {
    "OPENAI_API_KEY": "sk-openai-value",
    "HERALD_TOKEN": "gateway-token-value",
    "HERALD_AGENT__MODEL": "openai/gpt-4o-mini",
}


@pytest.fixture
def with_secrets() -> LoadedSettings:
    return load_settings(JSON5_EXAMPLE, environ=SECRET_ENV)


def _parse(text: str, fmt: Format) -> dict[str, Any]:
    if fmt == "toml":
        return tomllib.loads(text)
    parsed = json.loads(text) if fmt == "json" else pyjson5.decode(text)
    assert isinstance(parsed, dict)
    return parsed


@pytest.mark.parametrize("fmt", ["json5", "json", "toml"])
def test_render_masks_every_secret(with_secrets: LoadedSettings, fmt: Format) -> None:
    text = render_settings(with_secrets, fmt)
    for value in SECRET_ENV.values():
        if value != "openai/gpt-4o-mini":
            assert value not in text
    data = _parse(text, fmt)
    assert data["gateway"]["auth"]["token"] == MASK
    assert data["models"]["providers"]["openai"]["apiKey"] == MASK
    assert data["agent"]["model"] == "openai/gpt-4o-mini"
    slack = data["channels"]["slack"]
    if fmt == "toml":
        assert "botToken" not in slack  # TOML has no null
    else:
        assert slack["botToken"] is None
        assert data["models"]["providers"]["anthropic"]["apiKey"] is None


def test_render_uses_camel_case_keys(with_secrets: LoadedSettings) -> None:
    data = _parse(render_settings(with_secrets, "json"), "json")
    assert data["agent"]["subagents"]["maxConcurrent"] == 1
    assert data["models"]["providers"]["demo"]["models"][0]["cost"]["cacheRead"] == 0.075


@pytest.mark.parametrize("fmt", ["json5", "json", "toml"])
def test_rendered_config_loads_back_to_the_same_settings(
    with_secrets: LoadedSettings, fmt: Format, tmp_path: Path
) -> None:
    path = tmp_path / f"shown.{fmt}"
    path.write_text(render_settings(with_secrets, fmt), encoding="utf-8")
    again = load_settings(path, environ={})
    # Secrets come back as the mask; pydantic's own dump masks both sides the same way.
    assert again.settings.model_dump(mode="json") == with_secrets.settings.model_dump(mode="json")
    secret = again.settings.gateway.auth.token
    assert secret is not None
    assert secret.get_secret_value() == MASK
    assert again.unset_secrets == frozenset()


@pytest.mark.parametrize("fmt", ["json5", "json", "toml"])
def test_defaults_render_and_load_back(
    fmt: Format, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    defaults = load_settings(environ={})
    path = tmp_path / f"defaults.{fmt}"
    path.write_text(render_settings(defaults, fmt), encoding="utf-8")
    assert load_settings(path, environ={}).settings == defaults.settings


def test_render_keeps_awkward_strings_intact(tmp_path: Path) -> None:
    prompt = 'Quotes " and \\ backslash,\ttab, newline\nand ünïcode, DEL \x7f, ${NOT_A_VAR}'
    source = tmp_path / "awkward.json5"
    source.write_text(
        json.dumps({"agent": {"systemPrompt": prompt.replace("${", "$${")}}), encoding="utf-8"
    )
    loaded = load_settings(source, environ={})
    assert loaded.settings.agent.system_prompt == prompt
    for fmt in ("json5", "json", "toml"):
        shown = tmp_path / f"shown.{fmt}"
        shown.write_text(render_settings(loaded, fmt), encoding="utf-8")
        assert load_settings(shown, environ={}).settings.agent.system_prompt == prompt


def test_render_rejects_an_unknown_format(with_secrets: LoadedSettings) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        render_settings(with_secrets, "yaml")  # type: ignore[arg-type]

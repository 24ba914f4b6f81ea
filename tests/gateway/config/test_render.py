"""``herald config show`` and the secrets the schema declares (gateway/config/_render.py)."""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from configbase import ConfigModel
from gateway.commands.config import show_config
from gateway.config import MASK, LoadedSettings, load_settings, render_settings
from gateway.settings import HeraldSettings

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "herald.json5"
SECRET_ENV = {
    "HERALD_TOKEN": "gateway-token-value",
    "OPENAI_API_KEY": "sk-openai-value",
    "HERALD_AGENT__MODEL": "openai/gpt-4o-mini",
    "HERALD_CHANNELS__DISCORD__TOKEN": "discord-token-value",
}


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value if v is not None]
    return value


def _show(fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert show_config(argparse.Namespace(config=str(EXAMPLE), format=fmt)) == 0
    return capsys.readouterr().out


def test_config_show_toml_parses_back_to_the_json_data(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    as_json = json.loads(_show("json", capsys))
    as_toml = tomllib.loads(_show("toml", capsys))
    assert as_toml == _without_nulls(as_json)  # TOML has no null: unset keys are left out
    assert as_toml["models"]["providers"]["openai"]["apiKey"] == MASK
    assert as_toml["models"]["providers"]["demo"]["models"][0]["cost"]["cacheRead"] == 0.075


def test_defaults_as_toml_parse_back_to_the_json_data(tmp_path: Path) -> None:
    loaded = LoadedSettings(HeraldSettings(), None, tmp_path, frozenset())
    as_toml = tomllib.loads(render_settings(loaded, "toml"))
    assert as_toml == _without_nulls(json.loads(render_settings(loaded, "json")))


class _Vault(ConfigModel):
    label: str = "vault"
    passphrase: SecretStr | None = None


class _WithVaults(HeraldSettings):
    """The schema with a section no list of secrets has ever heard of."""

    vaults: dict[str, list[_Vault]] = {}


def test_a_new_secret_field_is_masked_without_being_listed(tmp_path: Path) -> None:
    secret = "vault-passphrase-value"
    settings = _WithVaults.model_validate({"vaults": {"home": [{"passphrase": secret}, {}]}})
    loaded = LoadedSettings(settings, None, tmp_path, frozenset())
    for fmt in ("json", "toml"):
        text = render_settings(loaded, fmt)
        assert secret not in text
        data = json.loads(text) if fmt == "json" else tomllib.loads(text)
        assert data["vaults"]["home"] == [
            {"label": "vault", "passphrase": MASK},
            {"label": "vault"} if fmt == "toml" else {"label": "vault", "passphrase": None},
        ]


def test_rendering_a_loaded_file_masks_and_keeps_unset_secrets_null(tmp_path: Path) -> None:
    loaded = load_settings(EXAMPLE, environ=SECRET_ENV)
    data = json.loads(render_settings(loaded, "json"))
    assert data["channels"]["discord"]["token"] == MASK
    assert data["channels"]["slack"]["botToken"] is None
    assert "discord-token-value" not in render_settings(loaded, "json5")


KEY = 'sk-live-"quoted"-key-0123'


def _loaded_with_key_repeated(tmp_path: Path) -> LoadedSettings:
    path = tmp_path / "herald.json5"
    path.write_text(
        """{
  agent: { model: "proxy/m", systemPrompt: "never say ${KEY}" },
  models: { providers: {
    proxy: { api: "openai-completions", apiKey: "${KEY}",
             baseUrl: "https://user:${KEY}@llm.example/v1?key=${KEY}&team=a",
             models: [{ id: "m" }] },
    mirror: { api: "openai-completions", baseUrl: "https://bob:hunter2@mirror.local/v1",
              models: [{ id: "m" }] },
    short: { api: "openai-completions", apiKey: "abc", baseUrl: "https://abc.example/v1",
             models: [{ id: "m" }] },
  } },
}""",
        encoding="utf-8",
    )
    return load_settings(path, environ={"KEY": KEY})


@pytest.mark.parametrize("fmt", ["json5", "json", "toml"])
def test_a_secret_is_masked_wherever_it_appears_and_url_credentials_too(
    tmp_path: Path, fmt: Any
) -> None:
    text = render_settings(_loaded_with_key_repeated(tmp_path), fmt)
    for shown in (KEY, json.dumps(KEY)[1:-1], "live", "hunter2", "bob:"):
        assert shown not in text, shown
    if fmt == "toml":
        data = tomllib.loads(text)
    else:  # json5 starts with a comment line; the rest is JSON
        data = json.loads(text.split("\n", 1)[1] if fmt == "json5" else text)
    providers = data["models"]["providers"]
    assert providers["proxy"]["apiKey"] == MASK
    assert providers["proxy"]["baseUrl"] == f"https://{MASK}@llm.example/v1?key={MASK}&team=a"
    assert providers["mirror"]["baseUrl"] == f"https://{MASK}@mirror.local/v1"
    assert data["agent"]["systemPrompt"] == f"never say {MASK}"
    # Values as short as "abc" are masked where they are secrets, not wherever they occur
    # (as in the logs): that would garble more than it hides.
    assert providers["short"]["apiKey"] == MASK
    assert providers["short"]["baseUrl"] == "https://abc.example/v1"


def test_config_show_masks_a_secret_repeated_in_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = _loaded_with_key_repeated(tmp_path)
    monkeypatch.setenv("KEY", KEY)
    assert show_config(argparse.Namespace(config=str(loaded.path), format="json5")) == 0
    out = capsys.readouterr().out
    assert KEY not in out
    assert json.dumps(KEY)[1:-1] not in out
    assert f"https://{MASK}@llm.example/v1?key={MASK}&team=a" in out

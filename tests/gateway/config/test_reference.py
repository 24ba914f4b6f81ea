"""The configuration reference (gateway/config/reference.py, docs/configuration.md): every
key documented from the schema itself, and the committed file never behind the code."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pyjson5
from pydantic import BaseModel

from gateway.config._environment import env_overrides
from gateway.config._schema import dotted
from gateway.config.reference import entries, json_schema, main, render_reference
from gateway.settings import HeraldSettings

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "docs" / "configuration.md"


def models_below(annotation: Any) -> list[type[BaseModel]]:
    """Every model an annotation holds: itself, an optional's, a list's or a dict's."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType, list, dict) or hasattr(
        annotation, "__metadata__"
    ):
        return [model for arg in get_args(annotation) for model in models_below(arg)]
    return []


def undescribed(model: type[BaseModel], path: str) -> list[str]:
    """Paths of the fields at or below ``model`` with no description."""
    missing: list[str] = []
    for name, info in model.model_fields.items():
        where = f"{path}.{info.alias or name}" if path else (info.alias or name)
        if not (info.description or "").strip():
            missing.append(where)
        for child in models_below(info.annotation):
            missing += undescribed(child, where)
    return missing


def test_the_committed_reference_is_what_the_schema_generates() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render_reference(), (
        "docs/configuration.md is stale: run `make docs` and commit it"
    )


def test_make_docs_writes_the_reference(tmp_path: Path) -> None:
    target = tmp_path / "docs" / "configuration.md"
    assert main([str(target)]) == 0
    assert target.read_text(encoding="utf-8") == render_reference()


def test_every_settings_field_has_a_description() -> None:
    assert undescribed(HeraldSettings, "") == []


def test_the_json_schema_carries_every_description_on_one_line() -> None:
    schema = json_schema()
    blocks = [schema, *schema["$defs"].values()]
    properties = [(k, p) for block in blocks for k, p in block.get("properties", {}).items()]
    assert len(properties) > 80
    assert [key for key, prop in properties if not prop.get("description", "").strip()] == []
    assert [key for key, prop in properties if "\n" in prop["description"]] == []
    compaction = schema["$defs"]["CompactionConfig"]["properties"]["reserveTokens"]
    assert "contextWindow" in compaction["description"]


def block(text: str, key: str) -> str:
    """The reference's section for ``key``: from its heading to the next heading."""
    match = re.search(rf"^### `{re.escape(key)}`\n(.*?)(?=^##|\Z)", text, re.M | re.S)
    assert match is not None, f"{key} is not in the reference"
    return match.group(1)


def test_each_key_shows_its_type_default_variable_and_description() -> None:
    text = render_reference()
    spawn = block(text, "agent.subagents.maxConcurrent")
    assert "the width of the `subagent` lane" in spawn
    assert "- Type: integer (≥ 1)\n- Default: `1`\n" in spawn
    assert "- Environment: `HERALD_AGENT__SUBAGENTS__MAX_CONCURRENT`" in spawn
    port = block(text, "gateway.port")
    assert "- Type: integer (1–65,535)\n- Default: `8787`\n" in port
    mode = block(text, "agent.compaction.mode")
    assert '- Type: `"summary"`, `"truncate"` or `"off"`\n- Default: `"summary"`' in mode
    assert "- Default: `null`" in block(text, "agent.compaction.reserveTokens")
    assert "- Default: `4`" in block(text, "agent.compaction.keepRecentTurns")
    assert "- Default: `20000`" in block(text, "agent.tools.maxResultChars")
    window = block(text, "models.providers.<provider>.models[].contextWindow")
    assert "- Type: integer (256–100,000,000) or null\n- Default: `null`" in window
    assert "part of `HERALD_MODELS__PROVIDERS__<PROVIDER>__MODELS`" in window
    replica = block(text, "cluster.replicaId")
    assert "`<hostname>-<pid>`" in replica
    assert "- Environment: `HERALD_CLUSTER__REPLICA_ID`" in replica
    assert "- Required" in block(text, "models.providers.<provider>.api")


def test_secrets_are_marked_and_show_no_default() -> None:
    text = render_reference()
    secrets = {entry.key for entry in entries() if entry.secret}
    assert secrets == {
        "gateway.auth.token",
        "models.providers.<provider>.apiKey",
        "channels.slack.botToken",
        "channels.slack.appToken",
        "channels.slack.signingSecret",
        "channels.discord.token",
        "cluster.databaseUrl",
        "agent.tools.webSearch.apiKey",
        "mcp.servers.<server>.env",
        "mcp.servers.<server>.headers",
    }
    for key in secrets:
        assert "- Secret: " in block(text, key)
        assert "- Default" not in block(text, key)
    assert "its password is masked" in block(text, "cluster.databaseUrl")


def test_every_variable_the_reference_names_sets_its_key() -> None:
    named = [(entry.key, entry.env) for entry in entries() if entry.env is not None]
    assert len(named) >= 70
    for key, env in named:
        var = env.replace("<AGENT>", "MAIN").replace("<PROVIDER>", "DEMO")
        result = env_overrides({var: "1"})
        assert result.issues == [], var
        [path] = result.origins
        expected = key.replace("<agent>", "main").replace("<provider>", "demo")
        assert dotted(path) == expected, var
    for entry in entries():
        if entry.env is None and entry.env_whole is not None:
            var = entry.env_whole.replace("<PROVIDER>", "DEMO")
            assert [dotted(p) for p in env_overrides({var: "[]"}).origins] == [
                entry.key.split("[]")[0].replace("<provider>", "demo")
            ]


def keys_of(data: Any, path: str) -> list[str]:
    """Dotted keys of a config as the reference writes them (placeholders for names)."""
    names = {"routing.agents": "<agent>", "models.providers": "<provider>"}
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            name = names.get(path) or str(key)
            where = f"{path}.{name}" if path else name
            found += ([] if path in names else [where]) + keys_of(value, where)
    elif isinstance(data, list):
        for item in data:
            found += keys_of(item, f"{path}[]")
    return found


def test_every_key_of_the_example_config_is_in_the_reference() -> None:
    example = pyjson5.decode((REPO / "config" / "herald.json5").read_text())
    documented = {entry.key for entry in entries()}
    keys = keys_of(example, "")
    assert "models.providers.<provider>.models[].contextWindow" in keys
    assert sorted(set(keys) - documented) == []


def test_the_readme_links_the_reference_from_its_configuration_section() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configure\n", 1)[1].split("\n## ", 1)[0]
    assert "(docs/configuration.md)" in section

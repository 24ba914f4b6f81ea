"""``HERALD_<SECTION>__<KEY>`` overrides (gateway/config/_environment.py)."""

from __future__ import annotations

import pytest

from gateway.config import load_settings
from gateway.config._environment import env_overrides, env_value
from gateway.config._interpolation import Unresolved
from gateway.config._schema import annotation_at
from gateway.errors import ConfigError


def test_env_value_parses_json_but_keeps_text_for_string_fields() -> None:
    assert env_value("9000", annotation_at(("gateway", "port"))) == 9000
    assert env_value('["exec"]', annotation_at(("agent", "tools", "deny"))) == ["exec"]
    assert env_value("true", annotation_at(("channels", "slack", "enabled"))) is True
    assert env_value("12345", annotation_at(("channels", "discord", "token"))) == "12345"
    assert env_value("true", annotation_at(("gateway", "host"))) == "true"
    assert env_value("null", annotation_at(("agent", "subagents", "model"))) is None
    assert env_value("null", annotation_at(("gateway", "host"))) == "null"
    assert env_value("0.0.0.0", annotation_at(("gateway", "host"))) == "0.0.0.0"


def test_absurdly_nested_json_is_a_config_error_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert env_value(deep, annotation_at(("agent", "tools", "deny"))) == deep
    with pytest.raises(ConfigError) as excinfo:
        load_settings(None, environ={"HERALD_AGENT__TOOLS__DENY": deep})
    [issue] = excinfo.value.issues
    assert issue.key == "agent.tools.deny"
    assert "HERALD_AGENT__TOOLS__DENY" in issue.message


def test_env_overrides_map_segments_loosely_and_dict_keys_lowercased() -> None:
    found = env_overrides(
        {
            "HERALD_GATEWAY__STATE_DIR": "/srv",
            "HERALD_agent__subagents__MAXCONCURRENT": "3",
            "HERALD_ROUTING__AGENTS__HELPER__MODEL": "demo/scripted",
            "HERALD_CONFIG": "ignored.json5",
            "HERALD_TOKEN": "ignored",
            "OTHER__THING": "ignored",
        }
    )
    assert found.issues == []
    assert found.data == {
        "gateway": {"stateDir": "/srv"},
        "agent": {"subagents": {"maxConcurrent": 3}},
        "routing": {"agents": {"helper": {"model": "demo/scripted"}}},
    }
    assert found.origins[("gateway", "stateDir")] == "HERALD_GATEWAY__STATE_DIR"


def test_env_override_of_unknown_key_names_the_variable_and_suggests() -> None:
    found = env_overrides({"HERALD_GATEWAY__PROT": "1", "HERALD_ROUTING__AGENTS__MAIN__MODLE": "x"})
    messages = [str(issue) for issue in found.issues]
    assert messages == [
        "gateway.prot: unknown key (set by HERALD_GATEWAY__PROT); did you mean 'port'?",
        "routing.agents.main.modle: unknown key (set by HERALD_ROUTING__AGENTS__MAIN__MODLE); "
        "did you mean 'model'?",
    ]
    assert found.data == {}


def test_env_values_are_substituted_and_malformed_references_name_the_variable() -> None:
    found = env_overrides(
        {"HERALD_AGENT__MODEL": "${MODEL}", "HERALD_GATEWAY__HOST": "${", "X": "unused"}
    )
    assert found.data["agent"] == {"model": Unresolved("MODEL")}
    assert [str(issue) for issue in found.issues] == [
        "gateway.host: malformed variable reference: write ${NAME} or ${NAME:-default} "
        "(in HERALD_GATEWAY__HOST)"
    ]
    assert found.bad_paths == [("gateway", "host")]


def test_one_key_set_by_two_spellings_is_an_issue() -> None:
    found = env_overrides({"HERALD_GATEWAY__STATE_DIR": "/a", "HERALD_GATEWAY__STATEDIR": "/b"})
    assert [str(issue) for issue in found.issues] == [
        "gateway.stateDir: set by both HERALD_GATEWAY__STATEDIR and HERALD_GATEWAY__STATE_DIR"
    ]

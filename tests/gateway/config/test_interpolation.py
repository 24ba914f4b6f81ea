"""``${VAR}`` and whether a missing variable matters (gateway/config/_interpolation.py)."""

from __future__ import annotations

import pytest

from gateway.config._interpolation import (
    Unresolved,
    substitute,
    substitute_tree,
    unresolved_in,
    why_needed,
)
from gateway.config._schema import KeyPath


def test_substitute_replaces_variables_inside_text() -> None:
    env = {"HOST": "example.org", "PORT": "443"}
    assert substitute("https://${HOST}:${PORT}/v1", env) == "https://example.org:443/v1"


def test_substitute_default_applies_when_unset_or_empty() -> None:
    assert substitute("${A:-fallback}", {}) == "fallback"
    assert substitute("${A:-fallback}", {"A": ""}) == "fallback"
    assert substitute("${A:-fallback}", {"A": "set"}) == "set"
    assert substitute("${A:-}", {}) == ""


def test_substitute_empty_variable_without_default_is_empty_not_missing() -> None:
    assert substitute("${A}", {"A": ""}) == ""


def test_substitute_missing_variable_makes_the_value_unresolved() -> None:
    assert substitute("Bearer ${TOKEN}", {}) == Unresolved("TOKEN")


def test_substitute_double_dollar_is_a_literal() -> None:
    assert substitute("$${HOME}/x and $5", {"HOME": "/root"}) == "${HOME}/x and $5"


@pytest.mark.parametrize("text", ["${UNCLOSED", "${1BAD}", "${}", "a ${B C}"])
def test_substitute_rejects_malformed_references(text: str) -> None:
    with pytest.raises(ValueError, match="malformed variable reference"):
        substitute(text, {"UNCLOSED": "x"})


def test_substitute_tree_reaches_every_string_and_collects_malformed_references() -> None:
    problems: list[tuple[KeyPath, str]] = []
    value = {"a": ["${X}", {"b": "${Y}"}], "c": "${", "d": 5}
    result = substitute_tree(value, {"X": "x"}, ("root",), problems)
    assert result == {"a": ["x", {"b": Unresolved("Y")}], "c": "${", "d": 5}
    assert [where for where, _ in problems] == [("root", "c")]
    assert unresolved_in(result) == [(("a", 1, "b"), Unresolved("Y"))]


def test_a_disabled_channels_secret_is_not_needed() -> None:
    path: KeyPath = ("channels", "slack", "botToken")
    assert why_needed(path, {}) is None  # slack is disabled by default
    assert why_needed(path, {"channels": {"slack": {"enabled": "off"}}}) is None
    enabled = {"channels": {"slack": {"enabled": True}}}
    assert why_needed(path, enabled) == "channels.slack.enabled is true"


def test_a_providers_key_is_needed_only_when_a_model_uses_the_provider() -> None:
    path: KeyPath = ("models", "providers", "openai", "apiKey")
    assert why_needed(path, {}) is None  # the default model is demo/scripted
    uses = {"routing": {"agents": {"main": {"model": "openai/gpt"}}}}
    assert why_needed(path, uses) == "routing.agents.main.model uses provider 'openai'"
    assert why_needed(path, {"agent": {"model": "openai/gpt"}}) == (
        "agent.model uses provider 'openai'"
    )


def test_the_gateway_token_is_left_to_the_schema_and_other_keys_are_needed() -> None:
    assert why_needed(("gateway", "auth", "token"), {}) is None
    assert why_needed(("agent", "model"), {}) == ""

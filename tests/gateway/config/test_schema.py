"""The schema walked by key (gateway/config/_schema.py)."""

from __future__ import annotations

from pydantic import SecretStr

from gateway.config._schema import (
    annotation_at,
    canonical_keys,
    dotted,
    field_alias,
    holds_secret,
    model_class,
    suggestion,
    unwrap,
)
from gateway.settings import GatewayConfig, HeraldSettings, ModelConfig, ProviderConfig


def test_dotted_writes_list_indices_in_brackets() -> None:
    assert dotted(("models", "providers", "openai", "models", 0, "id")) == (
        "models.providers.openai.models[0].id"
    )
    assert dotted(()) == ""


def test_annotation_at_follows_aliases_dict_keys_and_list_items() -> None:
    assert model_class(annotation_at(("models", "providers", "any"))) is ProviderConfig
    assert model_class(annotation_at(("models", "providers", "x", "models", 3))) is ModelConfig
    assert unwrap(annotation_at(("gateway", "stateDir"))) == (str, True)
    assert unwrap(annotation_at(("gateway", "state_dir"))) == (str, True)
    assert annotation_at(("gateway", "nope")) is None
    assert annotation_at(("gateway", "port", "below")) is None


def test_field_alias_and_suggestion() -> None:
    assert field_alias(GatewayConfig, "state_dir") == "stateDir"
    assert field_alias(GatewayConfig, "STATE_DIR") is None
    assert field_alias(GatewayConfig, "STATE_DIR", loosely=True) == "stateDir"
    assert suggestion(GatewayConfig, "prot") == "did you mean 'port'?"
    assert suggestion(GatewayConfig, "zzz").startswith("expected one of: host, port, auth")


def test_holds_secret_sees_secrets_in_fields_models_dicts_and_lists() -> None:
    assert holds_secret(annotation_at(("gateway", "auth", "token")))
    assert holds_secret(annotation_at(("gateway", "auth")))  # a model with a secret field
    assert holds_secret(annotation_at(("models", "providers", "x")))
    assert holds_secret(SecretStr | None)
    assert not holds_secret(annotation_at(("gateway", "host")))
    assert not holds_secret(annotation_at(("gateway",)))  # only direct fields count


def test_canonical_keys_renames_snake_case_unless_both_spellings_are_given() -> None:
    data = {
        "gateway": {"state_dir": "/a", "shutdown_drain_seconds": 1},
        "routing": {"agents": {"my_agent": {"system_prompt": "x"}}},
        "models": {"providers": {"p": {"models": [{"max_tokens": 5}]}}},
        "agent": {"max_iterations": 1, "maxIterations": 2},
    }
    assert canonical_keys(data, HeraldSettings) == {
        "gateway": {"stateDir": "/a", "shutdownDrainSeconds": 1},
        "routing": {"agents": {"my_agent": {"systemPrompt": "x"}}},  # agent ids stay
        "models": {"providers": {"p": {"models": [{"maxTokens": 5}]}}},
        # Both spellings stay, so that validation can say they are the same key.
        "agent": {"max_iterations": 1, "maxIterations": 2},
    }

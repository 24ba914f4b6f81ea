"""Secrets found by walking the schema (configbase's ``secrets_in``)."""

from __future__ import annotations

from pydantic import SecretStr

from configbase import ConfigModel, secrets_in
from gateway.logs import SecretRedactor
from gateway.settings import HeraldSettings


class _Vault(ConfigModel):
    label: str = "vault"
    passphrase: SecretStr | None = None


class _WithVaults(HeraldSettings):
    """The schema with a section no list of secrets has ever heard of."""

    vaults: dict[str, list[_Vault]] = {}


def test_every_secret_of_the_schema_is_listed() -> None:
    demo = {"api": "scripted", "apiKey": "k-demo", "models": [{"id": "scripted"}]}
    settings = HeraldSettings.model_validate(
        {
            "gateway": {"auth": {"token": "t-gateway"}},
            "models": {"providers": {"demo": demo, "b": {"api": "scripted", "apiKey": "k-b"}}},
            "channels": {
                "slack": {"botToken": "s-bot", "appToken": "s-app", "signingSecret": "s-sign"},
                "discord": {"token": "d-token"},
            },
        }
    )
    assert sorted(settings.secret_values()) == sorted(
        ["t-gateway", "k-demo", "k-b", "s-bot", "s-app", "s-sign", "d-token"]
    )


def test_unset_and_empty_secrets_are_not_listed() -> None:
    settings = HeraldSettings.model_validate({"gateway": {"auth": {"token": ""}}})
    assert settings.secret_values() == []


def test_a_new_secret_field_is_listed_and_redacted_without_touching_a_list() -> None:
    secret = "vault-passphrase-value"
    settings = _WithVaults.model_validate(
        {
            "vaults": {"home": [{"label": "empty"}, {"passphrase": secret}]},
            "gateway": {"auth": {"token": "gateway-token-value"}},
        }
    )
    assert sorted(settings.secret_values()) == ["gateway-token-value", secret]
    redactor = SecretRedactor()
    redactor.set_secrets(settings.secret_values())
    assert redactor.redact(f"unlocking with {secret}") == "unlocking with ********"


def test_secrets_in_walks_plain_containers_too() -> None:
    found = secrets_in({"a": (SecretStr("x1"), [SecretStr("")]), "b": _Vault(passphrase="x2")})
    assert found == ["x1", "x2"]

"""The ``channels.discord`` section: URL forms and required secrets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from channels.discord import DiscordConfig


def test_camel_case_keys_and_a_trailing_slash_on_the_api_root() -> None:
    config = DiscordConfig.model_validate(
        {
            "enabled": True,
            "token": "t",
            "requireMention": False,
            "apiBaseUrl": "https://discord.example/api/v10/",
            "gatewayUrl": "wss://gateway.discord.example/",
        }
    )

    assert config.api_base_url == "https://discord.example/api/v10"
    assert config.gateway_url == "wss://gateway.discord.example/"
    assert not config.require_mention
    assert config.required_secrets() == ("token",)


def test_empty_urls_mean_the_defaults() -> None:
    config = DiscordConfig.model_validate({"apiBaseUrl": "", "gatewayUrl": ""})

    assert (config.api_base_url, config.gateway_url) == (None, None)
    assert config.required_secrets() == ()


@pytest.mark.parametrize(
    ("key", "value"),
    [("apiBaseUrl", "wss://discord.com/api/v10"), ("gatewayUrl", "https://gateway.discord.gg/")],
)
def test_urls_of_the_wrong_scheme_are_refused(key: str, value: str) -> None:
    with pytest.raises(ValidationError, match=key):
        DiscordConfig.model_validate({key: value})

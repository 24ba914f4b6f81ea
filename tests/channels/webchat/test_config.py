"""``channels.webchat`` keys: the pinned ``enabled`` and the optional bounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from channels.webchat import WebchatConfig


def test_defaults_need_no_secrets() -> None:
    config = WebchatConfig()
    assert (config.enabled, config.agent, config.history_size, config.max_clients) == (
        True,
        "main",
        200,
        1000,
    )
    assert config.required_secrets() == ()


def test_keys_are_camel_case_in_files() -> None:
    config = WebchatConfig.model_validate({"enabled": False, "historySize": 5, "maxClients": 9})
    assert (config.enabled, config.history_size, config.max_clients) == (False, 5, 9)


@pytest.mark.parametrize("values", [{"historySize": 0}, {"maxClients": 0}, {"history": 5}])
def test_bad_values_and_unknown_keys_are_errors(values: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        WebchatConfig.model_validate(values)

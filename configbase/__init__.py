"""The configuration kernel every part of Herald builds on: the base of config models and the
handling of secrets. It imports nothing of Herald, so the gateway's providers, state and
cluster and the chat channels share it without sharing a layer (``channels`` never imports
the gateway; the gateway's providers never import a channel)."""

from configbase.model import ConfigModel
from configbase.secrets import (
    URL_MASK,
    SecretUrl,
    redact_url,
    secret_value,
    secrets_in,
    url_password,
)

__all__ = [
    "URL_MASK",
    "ConfigModel",
    "SecretUrl",
    "redact_url",
    "secret_value",
    "secrets_in",
    "url_password",
]

"""The base of every configuration model: camelCase keys, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr
from pydantic.alias_generators import to_camel


class ConfigModel(BaseModel):
    """Config sections use camelCase keys in files (``stateDir``) and snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )


def secret_value(secret: SecretStr | None) -> str | None:
    """The plain value of an optional secret; empty strings count as unset."""
    if secret is None:
        return None
    value = secret.get_secret_value()
    return value or None

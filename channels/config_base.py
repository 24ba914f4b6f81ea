"""The base of every configuration model: camelCase keys, unknown keys rejected."""

from __future__ import annotations

from collections.abc import Mapping

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
        # JSON5 reads Infinity and NaN, TOML inf and nan, and 1e999 overflows to infinity; no
        # setting means any of them, and a run record holding one is not valid JSON.
        allow_inf_nan=False,
    )


def secret_value(secret: SecretStr | None) -> str | None:
    """The plain value of an optional secret; empty strings count as unset."""
    if secret is None:
        return None
    value = secret.get_secret_value()
    return value or None


def secrets_in(value: object) -> list[str]:
    """The plain value of every set secret inside ``value``, found by walking the schema.

    Every ``SecretStr`` counts, at any depth: in a model's fields, in dicts and in lists (a
    provider's ``apiKey`` under ``models.providers``). A field added to the schema as a
    SecretStr is therefore masked in logs without being listed anywhere.
    """
    if isinstance(value, SecretStr):
        plain = value.get_secret_value()
        return [plain] if plain else []
    if isinstance(value, BaseModel):
        items: list[object] = [getattr(value, name) for name in type(value).model_fields]
    elif isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return []
    return [secret for item in items for secret in secrets_in(item)]

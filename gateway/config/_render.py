"""Showing the resolved configuration (``herald config show``), every secret masked.

Which values are secret is the schema's word: every ``SecretStr`` in the dumped settings is
masked, wherever it sits (a section, a provider in ``models.providers``, a list item).
"""

from __future__ import annotations

import json
from typing import Literal

import orjson
import tomli_w
from pydantic import SecretStr

from gateway.config._load import LoadedSettings

#: What ``herald config show`` prints in place of a secret that is set.
MASK = "********"

RenderFormat = Literal["json5", "json", "toml"]


def render_settings(loaded: LoadedSettings, fmt: RenderFormat = "json5") -> str:
    """The resolved configuration as text in camelCase, every secret masked.

    Set secrets print as ``********``, unset ones as null (omitted in TOML, which has no
    null). The text is valid input for ``load_settings`` (with the masks as values; a
    literal ``${`` in a value is written ``$${``).
    """
    dumped = loaded.settings.model_dump(mode="python", by_alias=True)
    data = {key: _masked(value) for key, value in dumped.items()}
    source = str(loaded.path) if loaded.path else "built-in defaults"
    header = f"Herald configuration resolved from {source}; secrets masked".replace("\n", " ")
    if fmt == "json":
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "json5":
        return f"// {header}\n" + json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "toml":
        table = {key: _without_nulls(value) for key, value in data.items() if value is not None}
        return f"# {header}\n\n" + tomli_w.dumps(table)
    raise ValueError(f"unknown format {fmt!r}; use json5, json or toml")


def _masked(value: object) -> object:
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else None
    if isinstance(value, str):
        return value.replace("${", "$${")  # so that loading the output gives the same text
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _without_nulls(value: object) -> object:
    """``value`` without None anywhere: TOML has no null, so an unset key is left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value if v is not None]
    return value

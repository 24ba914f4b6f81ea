"""Showing the resolved configuration (``herald config show``), every secret masked.

Which values are secret is the schema's word: every ``SecretStr`` in the dumped settings is
masked, wherever it sits (a section, a provider in ``models.providers``, a list item); a
``SecretUrl`` (``cluster.databaseUrl``) shows with only its password masked. A
secret's value is masked wherever else it appears too (an API key repeated in a ``baseUrl``
as ``?key=…`` or ``https://user:…@host``), and so are the credentials of any URL's userinfo.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final, Literal

import orjson
import tomli_w
from pydantic import SecretStr

from configbase import SecretUrl
from gateway.config._load import LoadedSettings
from gateway.logs import MIN_SECRET_LENGTH

#: What ``herald config show`` prints in place of a secret that is set.
MASK = "********"

RenderFormat = Literal["json5", "json", "toml"]

#: ``scheme://userinfo@``: whatever sits before the ``@`` of a URL's authority is a credential.
_URL_USERINFO: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")


def render_settings(loaded: LoadedSettings, fmt: RenderFormat = "json5") -> str:
    """The resolved configuration as text in camelCase, every secret masked.

    Set secrets print as ``********``, unset ones as null (omitted in TOML, which has no
    null). The text is valid input for ``load_settings`` (with the masks as values; a
    literal ``${`` in a value is written ``$${``).
    """
    dumped = loaded.settings.model_dump(mode="python", by_alias=True)
    # Shorter values are left alone, as in the logs: masking every "abc" would garble more
    # than it hides. Longest first, so a secret that contains another is masked whole.
    secrets = sorted(
        {s for s in loaded.settings.secret_values() if len(s) >= MIN_SECRET_LENGTH},
        key=len,
        reverse=True,
    )
    data = {_hidden(key, secrets): _masked(value, secrets) for key, value in dumped.items()}
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


def _masked(value: object, secrets: Sequence[str]) -> object:
    if isinstance(value, SecretUrl):  # the URL stays readable; its password does not
        return value.masked()
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else None
    if isinstance(value, str):
        # "$${" so that loading the output gives the same text.
        return _hidden(value, secrets).replace("${", "$${")
    if isinstance(value, dict):
        return {
            _hidden(k, secrets) if isinstance(k, str) else k: _masked(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v, secrets) for v in value]
    return value


def _hidden(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret value and any URL's userinfo masked."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return _URL_USERINFO.sub(rf"\g<1>{MASK}@", text)


def _without_nulls(value: object) -> object:
    """``value`` without None anywhere: TOML has no null, so an unset key is left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value if v is not None]
    return value

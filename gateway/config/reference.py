"""The configuration documented from the settings schema: the JSON Schema for editors, and
the reference ``docs/configuration.md``.

The reference lists every key of :class:`gateway.settings.HeraldSettings` (camelCase, as
files write it) with its type, default, description (the field's docstring) and the
environment variable that sets it. ``make docs`` runs
``python -m gateway.config.reference docs/configuration.md``; a test fails when the
committed file differs from what this module renders.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.alias_generators import to_snake
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from configbase import SecretUrl
from gateway.config._schema import fields_by_alias, model_class, unwrap
from gateway.constants import ENV_NESTED_DELIMITER, ENV_PREFIX
from gateway.settings import HeraldSettings


@dataclass(frozen=True, slots=True)
class Entry:
    """One key of the reference."""

    #: Dotted path as a file writes it: ``agent.subagents.maxConcurrent``,
    #: ``routing.agents.<agent>.model``, ``models.providers.<provider>.models[].id``.
    key: str
    type: str
    #: The default as JSON; None when required, a secret, or a section (its keys follow).
    default: str | None
    description: str
    #: ``HERALD_AGENT__SUBAGENTS__MAX_CONCURRENT``; None for a section, or inside a list.
    env: str | None
    #: The variable that sets the whole list holding this key, when it is inside one.
    env_whole: str | None
    #: How a secret is shown (``masked``, or ``password masked`` for a URL); None if not one.
    secret: str | None
    required: bool
    #: A section (its keys follow), a map of sections or a list of them.
    section: bool


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a model's fields sit: their key prefix, and how the environment reaches it."""

    key: str
    env: tuple[str, ...] | None
    env_whole: str | None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the config file's keys (camelCase, as files write them), each
    with its description on one line, for editors (``herald config schema``)."""
    schema = HeraldSettings.model_json_schema(by_alias=True)
    _unwrap_descriptions(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Herald configuration"
    return schema


def _unwrap_descriptions(node: object) -> None:
    # A docstring's line breaks are the source's layout, not the text's: editors would show
    # them mid-sentence.
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        for value in node.values():
            _unwrap_descriptions(value)
    elif isinstance(node, list):
        for value in node:
            _unwrap_descriptions(value)


def entries() -> list[Entry]:
    """Every key of the configuration, depth first in declaration order."""
    found: list[Entry] = []
    _walk(HeraldSettings, _Place("", (), None), found)
    return found


def _walk(model: type[BaseModel], place: _Place, found: list[Entry]) -> None:
    for alias, (_, info) in fields_by_alias(model).items():
        key = f"{place.key}.{alias}" if place.key else alias
        env = None if place.env is None else (*place.env, to_snake(alias).upper())
        inner, _ = unwrap(info.annotation)
        child = model_class(inner)
        item = _container_item(inner)
        secret = _secret_note(inner)
        required = info.is_required()
        top_level = not place.key  # HERALD_GATEWAY is no override: it has no "__"
        found.append(
            Entry(
                key=key,
                type=_type_name(info.annotation, info),
                default=None if secret or required else _default(info),
                description=_description(info, key),
                env=None if child or top_level else _env_name(env),
                env_whole=place.env_whole,
                secret=secret,
                required=required,
                section=child is not None or item is not None,
            )
        )
        if child is not None:
            _walk(child, _Place(key, env, place.env_whole), found)
        elif item is not None:
            kind, item_model = item
            if kind == "dict":
                name = alias.removesuffix("s")
                below = None if env is None else (*env, f"<{name.upper()}>")
                _walk(item_model, _Place(f"{key}.<{name}>", below, place.env_whole), found)
            else:
                whole = place.env_whole or _env_name(env)
                _walk(item_model, _Place(f"{key}[]", None, whole), found)


def _container_item(annotation: Any) -> tuple[Literal["dict", "list"], type[BaseModel]] | None:
    """The model a ``dict[str, Model]`` or ``list[Model]`` holds, and which it is."""
    origin = get_origin(annotation)
    if origin is dict and (model := model_class(get_args(annotation)[1])) is not None:
        return "dict", model
    if origin is list and (model := model_class(get_args(annotation)[0])) is not None:
        return "list", model
    return None


def _env_name(segments: tuple[str, ...] | None) -> str | None:
    return None if segments is None else ENV_PREFIX + ENV_NESTED_DELIMITER.join(segments)


def _description(info: FieldInfo, key: str) -> str:
    if not info.description:
        raise ValueError(f"{key}: the field has no docstring to describe it")
    return " ".join(info.description.split())


def _is_secret(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, SecretStr)


def _secret_note(annotation: Any) -> str | None:
    if isinstance(annotation, type) and issubclass(annotation, SecretUrl):
        return "its password is masked"
    if get_origin(annotation) is dict and _is_secret(unwrap(get_args(annotation)[1])[0]):
        return "each value masked"
    return "masked" if _is_secret(annotation) else None


def _default(info: FieldInfo) -> str | None:
    """The default as JSON; None for a section's default (its keys say it)."""
    value = info.get_default(call_default_factory=True)
    if value is PydanticUndefined or isinstance(value, BaseModel):
        return None
    return json.dumps(_jsonable(value), ensure_ascii=False, separators=(", ", ": "))


def _jsonable(value: object) -> object:
    """``value`` as JSON data, camelCase; a model only with what differs from its defaults."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 10, as a file would say it, not 10.0
    return value


def _type_name(annotation: Any, info: FieldInfo | None = None) -> str:
    """``integer, 1–65535``, ``"socket" or "http"``, ``list of strings or null``..."""
    inner, nullable = unwrap(annotation)
    text = _base_type(inner, _constraints(annotation, info))
    return f"{text} or null" if nullable else text


_BOUNDS = ("ge", "gt", "le", "lt", "min_length", "max_length")


def _constraints(annotation: Any, info: FieldInfo | None) -> dict[str, Any]:
    """The bounds on a value (``ge``, ``le``, ``min_length``...), wherever declared: on the
    field, or in an ``Annotated`` inside an optional (``Annotated[int, Field(ge=1)] | None``)."""
    metadata: list[Any] = list(info.metadata) if info is not None else []
    pending = [annotation]
    while pending:
        current = pending.pop()
        if get_origin(current) is Annotated:
            for extra in get_args(current)[1:]:
                metadata += extra.metadata if isinstance(extra, FieldInfo) else [extra]
            pending.append(get_args(current)[0])
        elif get_origin(current) in (Union, types.UnionType):
            pending += list(get_args(current))
    return {
        name: getattr(bound, name) for bound in metadata for name in _BOUNDS if hasattr(bound, name)
    }


def _base_type(inner: Any, bounds: dict[str, Any]) -> str:
    if inner is bool:
        return "boolean"
    if inner is int or inner is float:
        return ("integer" if inner is int else "number") + _range(bounds)
    if isinstance(inner, type) and issubclass(inner, SecretUrl):
        return "string (URL)"
    if inner is str or _is_secret(inner):
        return "string" + _length(bounds)
    if get_origin(inner) is Literal:
        choices = [f"`{json.dumps(choice)}`" for choice in get_args(inner)]
        return " or ".join([", ".join(choices[:-1]), choices[-1]] if len(choices) > 1 else choices)
    if model_class(inner) is not None:
        return "object"
    origin = get_origin(inner)
    if origin is list:
        return "list of " + _plural(get_args(inner)[0])
    if origin is dict:
        return "map of names to " + _plural(get_args(inner)[1])
    raise ValueError(f"no reference wording for the type {inner!r}")


def _plural(annotation: Any) -> str:
    inner, _ = unwrap(annotation)
    if inner is str:
        return "strings"
    if _is_secret(inner):
        return "strings (secrets)"
    if model_class(inner) is not None:
        return "objects"
    raise ValueError(f"no reference wording for a collection of {inner!r}")


def _range(bounds: dict[str, Any]) -> str:
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if "ge" in bounds and "le" in bounds:
        return f" ({low:,}–{high:,})"
    parts = []
    if low is not None:
        parts.append(f"{'≥' if 'ge' in bounds else '>'} {low:,}")
    if high is not None:
        parts.append(f"{'≤' if 'le' in bounds else '<'} {high:,}")
    return f" ({', '.join(parts)})" if parts else ""


def _length(bounds: dict[str, Any]) -> str:
    low, high = bounds.get("min_length"), bounds.get("max_length")
    if low is not None and high is not None:
        return f" ({low}–{high} characters)"
    if low is not None:
        return " (not empty)" if low == 1 else f" (at least {low} characters)"
    return ""


_HEADER = f"""\
# Configuration reference

<!-- Generated from the settings schema by `make docs`: edit the settings' docstrings
     (gateway/settings.py, channels/*/config.py), not this file. -->

Herald reads one configuration file, JSON5 (`.json5`, `.json`) or TOML (`.toml`), chosen
by its extension; [`config/herald.json5`](../config/herald.json5) is a complete, commented
example. Keys are written in camelCase, as listed here; unknown keys are errors. A value
comes from, in rising precedence: the default, the file, the environment, the command line.

- **Environment.** Each key's variable is `{ENV_PREFIX}` and the key's path in upper case,
  its segments joined by `{ENV_NESTED_DELIMITER}` (`HERALD_GATEWAY__PORT=9000`). Segments
  match keys case-insensitively with underscores ignored, so
  `HERALD_AGENT__SUBAGENTS__MAXCONCURRENT` works too. A value is read as JSON when it
  parses as JSON (`9000`, `true`, `["exec"]`), else as text; `null` clears a key that may
  be null. `<AGENT>` and `<PROVIDER>` stand for an agent id and a provider name. Keys inside
  a list (a provider's `models`) have no variable of their own: set the whole list, as JSON.
- **Variables in values.** A string may say `${{VAR}}` or `${{VAR:-default}}`; a missing
  variable is an error naming the key, unless nothing needs the value (a disabled channel,
  a provider no agent uses).
- **Secrets** are masked by `herald config show` and in every log line; write them as
  `${{VAR}}` and keep the values in the environment (under systemd, the unit's environment
  file).
- `herald config check` validates a configuration as `herald run` would, and
  `herald config schema` prints the JSON Schema of these keys (with these descriptions) for
  editors to complete and check a file with.
"""


def render_reference() -> str:
    """``docs/configuration.md``: every key with its type, default, variable, description."""
    found = entries()
    lines = [_HEADER, "## Sections", ""]
    lines += [f"- [`{e.key}`](#{e.key}): {e.description}" for e in found if "." not in e.key]
    for entry in found:
        if "." not in entry.key:
            lines += ["", f"## `{entry.key}`", "", _wrap(entry.description)]
            continue
        lines += ["", f"### `{entry.key}`", "", _wrap(entry.description), ""]
        lines += _facts(entry)
    return "\n".join(lines) + "\n"


def _facts(entry: Entry) -> list[str]:
    kind = f"{entry.type}; its keys follow" if entry.section else entry.type
    facts = [f"- Type: {kind}"]
    if entry.required:
        facts.append("- Required")
    elif entry.secret:
        facts.append(f"- Secret: {entry.secret} in `herald config show` and in logs")
    elif entry.default is not None:
        facts.append(f"- Default: {_code(entry.default)}")
    if entry.env is not None:
        facts.append(f"- Environment: `{entry.env}`")
    elif entry.env_whole is not None:
        facts.append(f"- Environment: part of `{entry.env_whole}` (the whole list, as JSON)")
    return facts


def _code(text: str) -> str:
    """``text`` as inline code, even when it holds a backtick."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _wrap(text: str, width: int = 92) -> str:
    """``text`` broken into lines of at most ``width`` characters (inline code kept whole)."""
    words: list[str] = []
    for word in text.split(" "):
        if words and words[-1].count("`") % 2:  # inside a code span: keep it on one line
            words[-1] += " " + word
        else:
            words.append(word)
    lines: list[str] = []
    line = ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference to the file named, or print it."""
    parser = argparse.ArgumentParser(
        prog="python -m gateway.config.reference", description=render_reference.__doc__
    )
    parser.add_argument("output", nargs="?", type=Path, help="file to write (default: stdout)")
    args = parser.parse_args(argv)
    text = render_reference()
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

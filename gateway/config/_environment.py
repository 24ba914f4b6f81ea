"""``HERALD_<SECTION>__<KEY>`` environment overrides, mapped onto the schema.

``HERALD_AGENT__SUBAGENTS__MAX_CONCURRENT=3`` sets ``agent.subagents.maxConcurrent``. Segments
match keys case-insensitively with underscores ignored; values are JSON when they parse as
JSON (``9000``, ``true``, ``["exec"]``), else the text itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from pydantic import SecretStr

from gateway.config._interpolation import substitute_tree
from gateway.config._schema import (
    KeyPath,
    annotation_at,
    dotted,
    field_alias,
    fields_by_alias,
    model_class,
    suggestion,
    unwrap,
)
from gateway.constants import ENV_NESTED_DELIMITER, ENV_PREFIX
from gateway.errors import ConfigIssue
from gateway.settings import HeraldSettings


def _accepts_string(annotation: Any) -> bool:
    inner, _ = unwrap(annotation)
    if inner is str or (isinstance(inner, type) and issubclass(inner, SecretStr)):
        return True
    return get_origin(inner) is Literal and all(isinstance(a, str) for a in get_args(inner))


def env_value(raw: str, annotation: Any) -> object:
    """An override's value: JSON when it parses as JSON, else the string itself.

    A field that takes a string keeps the text as written (a token ``12345`` stays a string);
    ``null`` clears a field that allows it.
    """
    try:
        parsed: object = json.loads(raw)
    except (ValueError, RecursionError):  # absurdly nested JSON is left to validation as text
        return raw
    inner, nullable = unwrap(annotation)
    if parsed is None:
        return None if nullable else raw
    if _accepts_string(inner) and not isinstance(parsed, str):
        return raw
    return parsed


def _set(data: dict[str, object], path: KeyPath, value: object) -> None:
    for key in path[:-1]:
        child = data.get(str(key))
        if not isinstance(child, dict):
            child = data[str(key)] = {}
        data = child
    data[str(path[-1])] = value


@dataclass(slots=True)
class EnvOverrides:
    """``HERALD_<SECTION>__<KEY>`` variables mapped onto the schema."""

    data: dict[str, object] = field(default_factory=dict)
    #: key path → the variable that set it.
    origins: dict[KeyPath, str] = field(default_factory=dict)
    issues: list[ConfigIssue] = field(default_factory=list)
    #: Keys whose value could not be used (malformed ``${...}``), already in ``issues``.
    bad_paths: list[KeyPath] = field(default_factory=list)


def env_overrides(environ: Mapping[str, str]) -> EnvOverrides:
    """Collect the overrides in ``environ``; unknown keys become issues with a suggestion.

    Only names with ``__`` after the prefix count (``HERALD_CONFIG`` and ``HERALD_TOKEN`` are
    not overrides). Segments match keys case-insensitively and without underscores; dict keys
    (agent ids, provider names) are taken lowercased.
    """
    result = EnvOverrides()
    for var in sorted(environ):
        if not var.upper().startswith(ENV_PREFIX):
            continue
        rest = var[len(ENV_PREFIX) :]
        if ENV_NESTED_DELIMITER not in rest:
            continue
        path = _env_path(var, rest.split(ENV_NESTED_DELIMITER), result.issues)
        if path is None:
            continue
        if path in result.origins:
            result.issues.append(
                ConfigIssue(f"set by both {result.origins[path]} and {var}", key=dotted(path))
            )
            continue
        problems: list[tuple[KeyPath, str]] = []
        value = env_value(environ[var], annotation_at(path))
        value = substitute_tree(value, environ, path, problems)
        for where, message in problems:
            result.issues.append(ConfigIssue(f"{message} (in {var})", key=dotted(where)))
            result.bad_paths.append(where)
        _set(result.data, path, value)
        result.origins[path] = var
    return result


def _env_path(var: str, segments: list[str], issues: list[ConfigIssue]) -> KeyPath | None:
    """The key path ``segments`` name, or None after appending why they name none."""
    annotation: Any = HeraldSettings
    path: KeyPath = ()
    for segment in segments:
        if not segment:
            issues.append(ConfigIssue(f"{var}: empty key between '__' separators"))
            return None
        inner, _ = unwrap(annotation)
        model = model_class(inner)
        if model is not None:
            alias = field_alias(model, segment, loosely=True)
            if alias is None:
                key = dotted((*path, segment.lower()))
                hint = suggestion(model, segment)
                issues.append(ConfigIssue(f"unknown key (set by {var}); {hint}", key=key))
                return None
            path = (*path, alias)
            annotation = fields_by_alias(model)[alias][1].annotation
        elif get_origin(inner) is dict:
            path = (*path, segment.lower())
            annotation = get_args(inner)[1]
        else:
            message = f"has no keys below it; set {dotted(path)} as a whole (in {var})"
            issues.append(ConfigIssue(message, key=dotted(path)))
            return None
    return path

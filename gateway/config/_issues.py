"""Turning validation errors into issues that name the file line, or the variable or flag.

Each pydantic error becomes one :class:`gateway.errors.ConfigIssue`: the key path in the
file's spelling, a message that says what was expected (and what was found, unless the key
may hold a secret), and where the key was set.
"""

from __future__ import annotations

import re

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from configbase import secret_value
from gateway.config._file import ConfigFile
from gateway.config._schema import (
    KeyPath,
    annotation_at,
    dotted,
    field_alias,
    holds_secret,
    model_class,
    suggestion,
)
from gateway.errors import ConfigIssue
from gateway.settings import CrossReferenceError, HeraldSettings


class Reporter:
    """Builds issues that point at the file line or at the variable or flag that set a key."""

    def __init__(self, config_file: ConfigFile | None, origins: dict[KeyPath, str]) -> None:
        self.file = config_file
        #: key path → "environment variable X" or "the command line".
        self.origins = origins

    def issue(self, path: KeyPath, message: str) -> ConfigIssue:
        """An issue about ``path``, placed where its value came from."""
        for end in range(len(path), 0, -1):
            if (origin := self.origins.get(path[:end])) is not None:
                return ConfigIssue(f"{message} (from {origin})", key=dotted(path))
        if self.file is None:
            return ConfigIssue(message, key=dotted(path) or None)
        return self.file.issue(path, message)


def schema_issues(
    exc: ValidationError, reporter: Reporter, unset: dict[str, str], failed: list[KeyPath]
) -> list[ConfigIssue]:
    """One issue per error of ``exc``; keys under ``failed`` were reported already.

    ``unset`` maps dotted keys left unset by a missing variable to that variable, so that a
    cross-reference that needs the key can say why it is empty.
    """
    issues: list[ConfigIssue] = []
    for error in exc.errors(include_url=False):
        original = (error.get("ctx") or {}).get("error")
        if isinstance(original, CrossReferenceError):
            for key, message in original.problems:
                path = tuple(key.split(".")) if isinstance(key, str) else key
                if _under(path, failed):
                    continue
                if key in unset:
                    message += f" (its variable {unset[key]} is not set)"
                issues.append(reporter.issue(path, message))
            continue
        loc: KeyPath = tuple(error["loc"])
        if _under(loc, failed):
            continue  # already reported: a missing variable or a malformed reference
        issues.append(reporter.issue(*describe(error, loc)))
    return issues


def _under(path: KeyPath, roots: list[KeyPath]) -> bool:
    return any(path[: len(root)] == root for root in roots)


def describe(error: ErrorDetails, loc: KeyPath) -> tuple[KeyPath, str]:
    """The key path and message for one pydantic error."""
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden" and loc and isinstance(loc[-1], str):
        model = model_class(annotation_at(loc[:-1]))
        if model is None:
            return loc, "unknown key"
        alias = field_alias(model, loc[-1])
        if alias is not None and alias != loc[-1]:
            return loc, f"{loc[-1]!r} and {alias!r} are the same key; keep one"
        return loc, f"unknown key {loc[-1]!r}; {suggestion(model, loc[-1])}"
    if kind == "missing":
        return loc, "required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    message = re.sub(r"a valid dictionary or instance of \w+", "an object { ... }", message)
    if kind == "value_error":
        return _narrowed(loc, value, message), message
    annotation = annotation_at(loc)
    if annotation is None or holds_secret(annotation):
        return loc, message  # never echo what may be a secret
    return loc, f"{message} (got {_shown(value)})"


def _narrowed(loc: KeyPath, value: object, message: str) -> KeyPath:
    """A model-level error names one of its keys first (``defaultAgent 'x' is not...``)."""
    model = model_class(annotation_at(loc))
    keys = [k for k in value if isinstance(k, str)] if isinstance(value, dict) else []
    keys += [info.alias or name for name, info in model.model_fields.items()] if model else []
    found = [
        (match.start(), key)
        for key in keys
        if (match := re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message))
    ]
    return (*loc, min(found)[1]) if found else loc


def _shown(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def channel_secret_issues(settings: HeraldSettings, reporter: Reporter) -> list[ConfigIssue]:
    """A secret an enabled channel needs but was not given, one issue per secret."""
    issues: list[ConfigIssue] = []
    for name in type(settings.channels).model_fields:
        channel = getattr(settings.channels, name)
        for key in channel.required_secrets():
            attr = next(n for n, f in type(channel).model_fields.items() if (f.alias or n) == key)
            if secret_value(getattr(channel, attr)) is None:
                why = f"required when channels.{name}.enabled is true"
                if name == "slack":
                    why += f" and mode is {channel.mode!r}"
                issues.append(reporter.issue(("channels", name, key), why))
    return issues

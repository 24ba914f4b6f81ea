"""``${VAR}`` in configuration values, and whether a missing variable matters.

Values in the file and in ``HERALD_*`` variables may name environment variables:
``${VAR}``, ``${VAR:-default}``, and ``$${`` for a literal ``${``. A variable that is not set
leaves its value :class:`Unresolved`; the loader then asks :func:`why_needed` whether that is
an error (the value is needed) or the key is simply left unset (a disabled channel's token).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from gateway.config._schema import KeyPath, annotation_at, model_class
from gateway.settings import AgentDefaults

# ``$${`` is a literal ``${``; a ``${`` that is neither is a typo worth reporting.
_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A string value whose ``${VAR}`` names a variable that is not set."""

    variable: str


def substitute(text: str, environ: Mapping[str, str]) -> str | Unresolved:
    """Replace ``${VAR}`` and ``${VAR:-default}`` in ``text`` from ``environ``.

    ``${VAR:-default}`` takes the default when VAR is unset or empty, as in the shell, and
    ``$${`` stands for a literal ``${``. A missing variable without a default makes the whole
    value :class:`Unresolved`; a malformed reference raises ValueError.
    """
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        whole, name, default = match.group(0), match.group(1), match.group(2)
        if whole == "$${":
            return "${"
        if name is None:
            raise ValueError("malformed variable reference: write ${NAME} or ${NAME:-default}")
        value = environ.get(name)
        if default is not None and not value:
            return default
        if value is None:
            missing.append(name)
            return ""
        return value

    result = _REFERENCE.sub(replace, text)
    return Unresolved(missing[0]) if missing else result


def substitute_tree(
    value: object, environ: Mapping[str, str], path: KeyPath, problems: list[tuple[KeyPath, str]]
) -> object:
    """:func:`substitute` applied to every string inside ``value`` (dicts and lists).

    A malformed reference is appended to ``problems`` as (key path, message) and its text
    kept, so that one typo does not hide the other problems of the configuration.
    """
    if isinstance(value, str):
        try:
            return substitute(value, environ)
        except ValueError as exc:
            problems.append((path, str(exc)))
            return value
    if isinstance(value, dict):
        return {k: substitute_tree(v, environ, (*path, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_tree(v, environ, (*path, i), problems) for i, v in enumerate(value)]
    return value


def unresolved_in(value: object, path: KeyPath = ()) -> list[tuple[KeyPath, Unresolved]]:
    """Every :class:`Unresolved` value inside ``value``, with its key path."""
    if isinstance(value, Unresolved):
        return [(path, value)]
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in unresolved_in(v, (*path, k))]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in unresolved_in(v, (*path, i))]
    return []


def _get(data: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def why_needed(path: KeyPath, merged: Mapping[str, object]) -> str | None:
    """Why the value at ``path`` is needed ("" when it simply is), or None when it is not.

    ``merged`` is the configuration as the layers give it, before validation. Secrets of
    disabled channels and of providers no configured model uses are not needed, and the
    gateway token is required only off loopback, which the schema checks itself.
    """
    if path == ("gateway", "auth", "token"):
        return None
    if len(path) >= 3 and path[0] == "channels":
        enabled = _get(merged, "channels", str(path[1]), "enabled")
        if enabled is None:
            model = model_class(annotation_at(path[:2]))
            info = model.model_fields.get("enabled") if model else None
            enabled = info.default if info else True
        if str(enabled).lower() in ("false", "0", "no", "off"):
            return None
        required = _required_secrets(path[:2], _get(merged, "channels", str(path[1])))
        if len(path) == 3 and required is not None and str(path[2]) not in required:
            return None  # e.g. Slack's signingSecret in Socket Mode
        return f"channels.{path[1]}.enabled is true"
    if len(path) >= 4 and path[:2] == ("models", "providers"):
        users = [key for key, ref in _model_refs(merged) if ref.partition("/")[0] == path[2]]
        if not users:
            return None
        return f"{users[0]} uses provider {path[2]!r}"
    return ""


def _required_secrets(where: KeyPath, section: object) -> tuple[str, ...] | None:
    """The secret keys an enabled channel needs in the mode its section sets (its config
    model's ``required_secrets``); None when that cannot be told."""
    model = model_class(annotation_at(where))
    if model is None or not isinstance(section, Mapping):
        return None
    plain = {
        key: value for key, value in section.items() if isinstance(value, str | bool | int | float)
    }
    try:
        config = model.model_validate(plain)
    except ValidationError:
        return None
    needs = getattr(config, "required_secrets", None)
    return tuple(needs()) if callable(needs) else None


def _model_refs(merged: Mapping[str, object]) -> list[tuple[str, str]]:
    """(dotted key, ``provider/model``) for every model reference in the configuration."""
    model = _get(merged, "agent", "model")
    refs: list[tuple[str, object]] = [
        ("agent.model", AgentDefaults.model_fields["model"].default if model is None else model),
        ("agent.subagents.model", _get(merged, "agent", "subagents", "model")),
    ]
    agents = _get(merged, "routing", "agents")
    if isinstance(agents, dict):
        refs += [(f"routing.agents.{k}.model", _get(a, "model")) for k, a in agents.items()]
    return [(key, ref) for key, ref in refs if isinstance(ref, str)]

"""Loading the configuration (DESIGN §2): merge the sources, validate, report every problem.

Precedence: command-line overrides > ``HERALD_<SECTION>__<KEY>`` > the file > defaults. The
sources (:mod:`gateway.config_sources`) are plugged into pydantic-settings through
``settings_customise_sources``; every problem becomes a :class:`gateway.errors.ConfigIssue`
naming the file, line and key, raised together as one :class:`gateway.errors.ConfigError`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import SecretStr, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsError

from channels.config_base import secret_value
from gateway.config_sources import (
    ConfigFile,
    ConfigFileSource,
    HeraldEnvSource,
    KeyPath,
    OverridesSource,
    Unresolved,
    annotation_at,
    canonical_keys,
    dotted,
    env_overrides,
    field_alias,
    holds_secret,
    model_class,
    read_config_file,
    suggestion,
    unwrap,
)
from gateway.constants import CONFIG_ENV
from gateway.errors import ConfigError, ConfigIssue
from gateway.settings import AgentDefaults, CrossReferenceError, HeraldSettings

logger = logging.getLogger(__name__)

#: What ``herald config show`` prints in place of a secret that is set.
MASK = "********"

# The sources of the load in progress; a ContextVar keeps concurrent loads apart.
_SOURCES: ContextVar[tuple[PydanticBaseSettingsSource, ...]] = ContextVar(
    "herald_config_sources", default=()
)


class _SourcedSettings(HeraldSettings):
    """HeraldSettings fed by the file, environment and override sources of one load."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, *_SOURCES.get())


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    """A validated configuration and where it came from."""

    settings: HeraldSettings
    #: The config file, absolute; None when only defaults, environment and flags were used.
    path: Path | None
    #: The file's directory (or the working directory): base of relative paths in the file.
    config_dir: Path
    #: Dotted keys whose ``${VAR}`` was missing where the value is not needed (left unset).
    unset_secrets: frozenset[str]


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> LoadedSettings:
    """Load, merge and validate the configuration.

    ``path`` defaults to ``$HERALD_CONFIG``, else no file (defaults only). ``environ``
    (default ``os.environ``) supplies ``HERALD_*`` overrides and ``${VAR}`` values;
    ``overrides`` are command-line flags as a nested camelCase dict, highest precedence.
    Raises ConfigError listing every problem found; never another exception for bad input.
    """
    env = os.environ if environ is None else environ
    if path is None:
        path = env.get(CONFIG_ENV) or None
    config_file = read_config_file(path, env) if path is not None else None
    file_data = config_file.data if config_file else {}
    issues = list(config_file.issues) if config_file else []
    from_env = env_overrides(env)
    issues += from_env.issues
    cli_data = _overrides_data(overrides, issues)
    origins = {p: f"environment variable {var}" for p, var in from_env.origins.items()}
    origins |= {p: "the command line" for p in _leaf_paths(cli_data)}
    reporter = _Reporter(config_file, origins)

    merged = _merge(_merge(file_data, from_env.data), cli_data)
    unset: dict[str, str] = {}  # dotted key → the missing variable
    failed: list[KeyPath] = list(from_env.bad_paths)
    failed += config_file.bad_paths if config_file else []
    for layer, above in ((file_data, (from_env.data, cli_data)), (from_env.data, (cli_data,))):
        for where, marker in list(_unresolved(layer, ())):
            _put(layer, where, None)
            if any(_overridden(higher, where) for higher in above):
                continue
            reason = _why_needed(where, merged)
            if reason is None and unwrap(annotation_at(where))[1]:
                unset[dotted(where)] = marker.variable
                continue
            failed.append(where)
            message = f"environment variable {marker.variable} is not set"
            issues.append(reporter.issue(where, f"{message} ({reason})" if reason else message))

    sources = (
        OverridesSource(_SourcedSettings, cli_data),
        HeraldEnvSource(_SourcedSettings, from_env.data),
        ConfigFileSource(_SourcedSettings, file_data),
    )
    token = _SOURCES.set(sources)
    validated: HeraldSettings | None = None
    try:
        validated = _SourcedSettings()
    except ValidationError as exc:
        issues += _schema_issues(exc, reporter, unset, failed)
    except SettingsError as exc:  # defensive: our sources hand over plain data
        issues.append(ConfigIssue(f"cannot load settings: {exc}"))
    finally:
        _SOURCES.reset(token)
    if validated is not None and not issues:
        issues += _channel_secret_issues(validated, reporter)
    if issues or validated is None:
        # File problems in file order, then those from the environment and flags.
        issues.sort(key=lambda i: (i.file is None, i.line or 0, i.column or 0))
        raise ConfigError(issues)
    # A plain HeraldSettings compares equal to one built elsewhere; the values are validated.
    settings = HeraldSettings.model_construct(
        validated.model_fields_set,
        **{name: getattr(validated, name) for name in HeraldSettings.model_fields},
    )
    logger.debug("configuration loaded from %s", config_file.path if config_file else "defaults")
    return LoadedSettings(
        settings=settings,
        path=config_file.path if config_file else None,
        config_dir=config_file.path.parent if config_file else Path.cwd(),
        unset_secrets=frozenset(unset),
    )


# --- merging and ${VAR} that is not set ----------------------------------------------------


def _overrides_data(
    overrides: Mapping[str, object] | None, issues: list[ConfigIssue]
) -> dict[str, object]:
    def plain(value: object) -> object:
        if isinstance(value, Mapping):
            result: dict[str, object] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    issues.append(ConfigIssue(f"command-line override key {key!r} is not text"))
                    continue
                result[key] = plain(item)
            return result
        if isinstance(value, list | tuple):
            return [plain(item) for item in value]
        return value

    if overrides is None:
        return {}
    data = plain(overrides)
    if not isinstance(data, dict):
        issues.append(ConfigIssue("command-line overrides must be a mapping of keys"))
        return {}
    result = canonical_keys(data, HeraldSettings)
    return result if isinstance(result, dict) else {}


def _leaf_paths(data: object, path: KeyPath = ()) -> list[KeyPath]:
    if isinstance(data, dict) and data:
        return [p for key, value in data.items() for p in _leaf_paths(value, (*path, key))]
    return [path] if path else []


def _merge(base: dict[str, object], top: dict[str, object]) -> dict[str, object]:
    result = dict(base)
    for key, value in top.items():
        below = result.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            value = _merge(below, value)
        result[key] = value
    return result


def _unresolved(value: object, path: KeyPath) -> list[tuple[KeyPath, Unresolved]]:
    if isinstance(value, Unresolved):
        return [(path, value)]
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _unresolved(v, (*path, k))]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _unresolved(v, (*path, i))]
    return []


def _put(data: Any, path: KeyPath, value: object) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _overridden(higher: object, path: KeyPath) -> bool:
    """Whether a higher-precedence layer sets ``path`` or replaces a section holding it."""
    for key in path:
        if not isinstance(higher, dict) or key not in higher:
            return False
        higher = higher[key]
        if not isinstance(higher, dict):
            return True
    return True


def _get(data: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _why_needed(path: KeyPath, merged: dict[str, object]) -> str | None:
    """Why the value at ``path`` is needed ("" when it simply is), or None when it is not.

    Secrets of disabled channels and of providers no configured model uses are not needed,
    and the gateway token is required only off loopback, which the schema checks itself.
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
        return f"channels.{path[1]}.enabled is true"
    if len(path) >= 4 and path[:2] == ("models", "providers"):
        users = [key for key, ref in _model_refs(merged) if ref.partition("/")[0] == path[2]]
        if not users:
            return None
        return f"{users[0]} uses provider {path[2]!r}"
    return ""


def _model_refs(merged: dict[str, object]) -> list[tuple[str, str]]:
    model = _get(merged, "agent", "model")
    refs: list[tuple[str, object]] = [
        ("agent.model", AgentDefaults.model_fields["model"].default if model is None else model),
        ("agent.subagents.model", _get(merged, "agent", "subagents", "model")),
    ]
    agents = _get(merged, "routing", "agents")
    if isinstance(agents, dict):
        refs += [(f"routing.agents.{k}.model", _get(a, "model")) for k, a in agents.items()]
    return [(key, ref) for key, ref in refs if isinstance(ref, str)]


# --- turning validation errors into issues ------------------------------------------------


class _Reporter:
    """Builds issues that point at the file line or at the variable or flag that set a key."""

    def __init__(self, config_file: ConfigFile | None, origins: dict[KeyPath, str]) -> None:
        self.file = config_file
        self.origins = origins

    def issue(self, path: KeyPath, message: str) -> ConfigIssue:
        for end in range(len(path), 0, -1):
            if (origin := self.origins.get(path[:end])) is not None:
                return ConfigIssue(f"{message} (from {origin})", key=dotted(path))
        if self.file is None:
            return ConfigIssue(message, key=dotted(path) or None)
        line, column = self.file.locator.find(path) or (None, None)
        key = dotted(path) or None
        return ConfigIssue(message, file=self.file.name, key=key, line=line, column=column)


def _schema_issues(
    exc: ValidationError, reporter: _Reporter, unset: dict[str, str], failed: list[KeyPath]
) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for error in exc.errors(include_url=False):
        original = (error.get("ctx") or {}).get("error")
        if isinstance(original, CrossReferenceError):
            for key, message in original.problems:
                path = tuple(key.split("."))
                if _under(path, failed):
                    continue
                if key in unset:
                    message += f" (its variable {unset[key]} is not set)"
                issues.append(reporter.issue(path, message))
            continue
        loc: KeyPath = tuple(error["loc"])
        if _under(loc, failed):
            continue  # already reported: a missing variable or a malformed reference
        issues.append(reporter.issue(*_describe(error, loc)))
    return issues


def _under(path: KeyPath, roots: list[KeyPath]) -> bool:
    return any(path[: len(root)] == root for root in roots)


def _describe(error: ErrorDetails, loc: KeyPath) -> tuple[KeyPath, str]:
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


def _channel_secret_issues(settings: HeraldSettings, reporter: _Reporter) -> list[ConfigIssue]:
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


# --- showing the resolved configuration ---------------------------------------------------


def render_settings(loaded: LoadedSettings, fmt: Literal["json5", "json", "toml"] = "json5") -> str:
    """The resolved configuration as text in camelCase, every secret masked.

    Set secrets print as ``********``, unset ones as null (omitted in TOML, which has no
    null). The text is valid input for :func:`load_settings` (with the masks as values; a
    literal ``${`` in a value is written ``$${``).
    """
    data = {
        key: _masked(value)
        for key, value in loaded.settings.model_dump(mode="python", by_alias=True).items()
    }
    source = str(loaded.path) if loaded.path else "built-in defaults"
    header = f"Herald configuration resolved from {source}; secrets masked".replace("\n", " ")
    if fmt == "json":
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "json5":
        return f"// {header}\n" + json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "toml":
        lines = [f"# {header}"]
        _toml_table(lines, (), data)
        return "\n".join(lines) + "\n"
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


def _is_table_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml_table(
    lines: list[str], path: tuple[str, ...], table: dict[str, Any], *, item: bool = False
) -> None:
    plain = [
        (k, v)
        for k, v in table.items()
        if v is not None and not isinstance(v, dict) and not _is_table_array(v)
    ]
    nested = [k for k, v in table.items() if isinstance(v, dict) or _is_table_array(v)]
    header = ".".join(_toml_key(k) for k in path)
    if item:
        lines += ["", f"[[{header}]]"]
    elif path and (plain or not nested):
        lines += ["", f"[{header}]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in plain]
    for key in nested:
        value = table[key]
        if isinstance(value, dict):
            _toml_table(lines, (*path, key), value)
        else:
            for element in value:
                _toml_table(lines, (*path, key), element, item=True)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_string(text: str) -> str:
    # JSON's escapes are TOML's, except that TOML also forbids a raw DEL.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    return _toml_string(str(value))

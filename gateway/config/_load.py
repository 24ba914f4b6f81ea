"""Loading the configuration: layer the sources, validate once, report every problem.

Precedence: command-line overrides > ``HERALD_<SECTION>__<KEY>`` > the file > defaults. The
three layers are plain nested dicts with camelCase keys; they are merged key by key and the
result is validated once with ``HeraldSettings.model_validate``, the defaults filling what no
layer sets. Every problem becomes a :class:`gateway.errors.ConfigIssue` naming the file,
line and key (or the variable or flag), raised together as one ConfigError.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from gateway.config._environment import env_overrides
from gateway.config._file import read_config_file
from gateway.config._interpolation import unresolved_in, why_needed
from gateway.config._issues import Reporter, channel_secret_issues, schema_issues
from gateway.config._schema import (
    KeyPath,
    annotation_at,
    canonical_keys,
    dotted,
    undotted,
    unwrap,
)
from gateway.constants import CONFIG_ENV
from gateway.errors import ConfigError, ConfigIssue
from gateway.settings import HeraldSettings

logger = logging.getLogger(__name__)


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
    #: Places issues found after loading (the start's checks) where their key was set.
    reporter: Reporter | None = field(default=None, compare=False, repr=False)

    def place(self, issue: ConfigIssue) -> ConfigIssue:
        """``issue`` at its key's line in the file (or naming the variable or flag that set
        the key); unchanged when it is placed already or names no key."""
        if issue.file or issue.key is None or self.reporter is None:
            return issue
        return self.reporter.issue(undotted(issue.key), issue.message)


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> LoadedSettings:
    """Load, merge and validate the configuration.

    ``path`` defaults to the first file of :func:`find_config`, else no file (defaults
    only). ``environ``
    (default ``os.environ``) supplies ``HERALD_*`` overrides and ``${VAR}`` values;
    ``overrides`` are command-line flags as a nested camelCase dict, highest precedence.
    Raises ConfigError listing every problem found; never another exception for bad input.
    """
    env = os.environ if environ is None else environ
    if path is None:
        path = find_config(env)
    config_file = read_config_file(path, env) if path is not None else None
    file_data = config_file.data if config_file else {}
    issues = list(config_file.issues) if config_file else []
    from_env = env_overrides(env)
    issues += from_env.issues
    cli_data = _overrides_data(overrides, issues)
    origins = {p: f"environment variable {var}" for p, var in from_env.origins.items()}
    origins |= {p: "the command line" for p in _leaf_paths(cli_data)}
    reporter = Reporter(config_file, origins)

    # A ${VAR} that is not set empties its key; that is an error only where the value is
    # needed and no higher layer replaces it.
    merged = _merge(_merge(file_data, from_env.data), cli_data)
    unset: dict[str, str] = {}  # dotted key → the missing variable
    failed: list[KeyPath] = list(from_env.bad_paths)
    failed += config_file.bad_paths if config_file else []
    for layer, above in ((file_data, (from_env.data, cli_data)), (from_env.data, (cli_data,))):
        for where, marker in unresolved_in(layer):
            _put(layer, where, None)
            if any(_overridden(higher, where) for higher in above):
                continue
            reason = why_needed(where, merged)
            if reason is None and unwrap(annotation_at(where))[1]:
                unset[dotted(where)] = marker.variable
                continue
            failed.append(where)
            message = f"environment variable {marker.variable} is not set"
            issues.append(reporter.issue(where, f"{message} ({reason})" if reason else message))

    settings: HeraldSettings | None = None
    try:
        # Merged again: the unresolved values above are now None in their layers.
        layered = _merge(_merge(file_data, from_env.data), cli_data)
        settings = HeraldSettings.model_validate(layered)
    except ValidationError as exc:
        issues += schema_issues(exc, reporter, unset, failed)
    if settings is not None and not issues:
        issues += channel_secret_issues(settings, reporter)
    if issues or settings is None:
        # File problems in file order, then those from the environment and flags.
        issues.sort(key=lambda i: (i.file is None, i.line or 0, i.column or 0))
        raise ConfigError(issues)
    logger.debug("configuration loaded from %s", config_file.path if config_file else "defaults")
    return LoadedSettings(
        settings=settings,
        path=config_file.path if config_file else None,
        config_dir=config_file.path.parent if config_file else Path.cwd(),
        unset_secrets=frozenset(unset),
        reporter=reporter,
    )


#: File names looked for in each folder of the lookup, in order.
CONFIG_NAMES: Final = ("herald.json5", "herald.toml", "herald.json")
SYSTEM_CONFIG_DIR: Final = Path("/etc/herald")


def config_candidates(environ: Mapping[str, str]) -> list[Path]:
    """Where a config file is looked for when none is named, in order: the current
    directory, ``$XDG_CONFIG_HOME/herald`` (``~/.config/herald``), ``/etc/herald``."""
    folders = [Path.cwd()]
    xdg = environ.get("XDG_CONFIG_HOME")
    home = environ.get("HOME")
    if xdg:
        folders.append(Path(xdg) / "herald")
    elif home:
        folders.append(Path(home) / ".config" / "herald")
    folders.append(SYSTEM_CONFIG_DIR)
    return [folder / name for folder in folders for name in CONFIG_NAMES]


def find_config(environ: Mapping[str, str]) -> str | None:
    """The config file to use when ``--config`` names none: ``$HERALD_CONFIG``, else the
    first of :func:`config_candidates` that exists, else None (embedded defaults)."""
    named = environ.get(CONFIG_ENV)
    if named:
        return named
    for candidate in config_candidates(environ):
        if candidate.is_file():
            return str(candidate)
    return None


def _overrides_data(
    overrides: Mapping[str, object] | None, issues: list[ConfigIssue]
) -> dict[str, object]:
    """The command-line overrides as plain dicts and lists with canonical keys."""

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
    """``top`` over ``base``: sections merge key by key, anything else replaces."""
    result = dict(base)
    for key, value in top.items():
        below = result.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            value = _merge(below, value)
        result[key] = value
    return result


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

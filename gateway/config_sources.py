"""Where configuration values come from, as pydantic-settings sources.

Three sources feed :class:`gateway.settings.HeraldSettings`: the file (JSON5 or TOML, chosen
by extension), ``HERALD_<SECTION>__<KEY>`` environment overrides and command-line overrides.
This module reads and parses them, substitutes ``${VAR}``, and maps keys onto the schema;
:mod:`gateway.config_loader` merges them, validates and reports problems.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tomllib
import types
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import pyjson5
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from gateway.constants import ENV_NESTED_DELIMITER, ENV_PREFIX
from gateway.errors import ConfigError, ConfigIssue
from gateway.settings import HeraldSettings

logger = logging.getLogger(__name__)

KeyPath = tuple[str | int, ...]

FileFormat = Literal["json5", "toml"]
FORMATS_BY_SUFFIX: dict[str, FileFormat] = {".json5": "json5", ".json": "json5", ".toml": "toml"}

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
    """:func:`substitute` applied to every string inside ``value`` (dicts and lists)."""
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


# --- the schema, walked by key ------------------------------------------------------------


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """``annotation`` without ``Annotated`` and ``None``; and whether None was allowed."""
    nullable = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            nullable = nullable or len(args) < len(get_args(annotation))
            if len(args) != 1:
                return annotation, nullable
            annotation = args[0]
        else:
            return annotation, nullable


def model_class(annotation: Any) -> type[BaseModel] | None:
    inner, _ = unwrap(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _fields(model: type[BaseModel]) -> dict[str, tuple[str, FieldInfo]]:
    """alias → (python name, field)."""
    return {(info.alias or name): (name, info) for name, info in model.model_fields.items()}


def _loose(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def field_alias(model: type[BaseModel], key: str, *, loose: bool = False) -> str | None:
    """The file key (alias) of the field ``key`` names in ``model``, or None."""
    for alias, (name, _) in _fields(model).items():
        if key in (alias, name) or (loose and _loose(key) == _loose(alias)):
            return alias
    return None


def suggestion(model: type[BaseModel], key: str) -> str:
    """``did you mean 'x'?`` for the closest key of ``model``, else the keys it has."""
    aliases = list(_fields(model))
    lowered = {alias.lower(): alias for alias in aliases}
    close = get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    if close:
        return f"did you mean {lowered[close[0]]!r}?"
    return "expected one of: " + ", ".join(aliases)


def child_annotation(annotation: Any, key: str | int) -> Any | None:
    """The annotation of ``annotation[key]``: a model's field, a dict's value, a list's item."""
    inner, _ = unwrap(annotation)
    if (model := model_class(inner)) is not None:
        alias = field_alias(model, key) if isinstance(key, str) else None
        return None if alias is None else _fields(model)[alias][1].annotation
    origin = get_origin(inner)
    if origin is dict and isinstance(key, str):
        return get_args(inner)[1]
    if origin is list and isinstance(key, int):
        return get_args(inner)[0]
    return None


def annotation_at(path: KeyPath) -> Any | None:
    """The annotation of the setting at ``path`` (aliases, dict keys, list indices)."""
    annotation: Any = HeraldSettings
    for key in path:
        annotation = child_annotation(annotation, key)
        if annotation is None:
            return None
    return annotation


def holds_secret(annotation: Any) -> bool:
    """Whether a value at this annotation is, or directly contains, a secret."""
    inner, _ = unwrap(annotation)
    if inner is SecretStr:
        return True
    if get_origin(inner) in (dict, list):
        return holds_secret(get_args(inner)[-1])
    model = model_class(inner)
    return model is not None and any(
        unwrap(info.annotation)[0] is SecretStr for info in model.model_fields.values()
    )


def canonical_keys(value: object, annotation: Any) -> object:
    """``value`` with snake_case spellings of model keys renamed to their camelCase alias.

    The file may say ``state_dir``; the environment and CLI say ``stateDir``. One spelling
    lets the sources merge and lets a later source override an earlier one.
    """
    inner, _ = unwrap(annotation)
    if isinstance(value, dict):
        model = model_class(inner)
        result: dict[str, object] = {}
        for key, item in value.items():
            alias = field_alias(model, key) if model is not None else None
            target = key if alias is None or alias in value else alias
            child = child_annotation(inner, key)
            result[target] = item if child is None else canonical_keys(item, child)
        return result
    if isinstance(value, list) and get_origin(inner) is list:
        item_type = get_args(inner)[0]
        return [canonical_keys(item, item_type) for item in value]
    return value


# --- where keys are in the text ----------------------------------------------------------

Position = tuple[int, int]


def _loose_path(path: KeyPath) -> KeyPath:
    return tuple(_loose(k) if isinstance(k, str) else k for k in path)


class KeyLocator:
    """Line and column (1-based) of each key in a config file's text, found by a light scan.

    Best effort: the file has already parsed, so the scan trusts its structure. A key that
    was not found falls back to its nearest enclosing key; spellings match loosely
    (``state_dir`` finds ``stateDir``).
    """

    def __init__(self, text: str) -> None:
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self._exact: dict[KeyPath, Position] = {}
        self._loose: dict[KeyPath, Position] = {}
        self.duplicates: list[tuple[KeyPath, Position]] = []

    def position(self, index: int) -> Position:
        line = bisect_right(self._line_starts, index)
        return line, index - self._line_starts[line - 1] + 1

    def record(self, path: KeyPath, index: int, *, unique: bool = False) -> None:
        where = self.position(index)
        if path in self._exact:
            # Keys below a duplicate are reported with it, not again on their own.
            if unique and not any(path[: len(d)] == d for d, _ in self.duplicates):
                self.duplicates.append((path, where))
            return
        self._exact[path] = where
        self._loose.setdefault(_loose_path(path), where)

    def find(self, path: KeyPath) -> Position | None:
        """Where ``path`` (or its nearest recorded ancestor) is, or None."""
        for end in range(len(path), 0, -1):
            found = self._exact.get(path[:end]) or self._loose.get(_loose_path(path[:end]))
            if found is not None:
                return found
        return None


class _ScanError(Exception):
    pass


class _Json5Scan:
    """Walks JSON5 text recording every object key and array element."""

    def __init__(self, text: str, locator: KeyLocator) -> None:
        self.text, self.i, self.locator = text, 0, locator

    def peek(self) -> str:
        return self.text[self.i : self.i + 1]

    def skip(self) -> None:
        text = self.text
        while self.i < len(text):
            if text[self.i].isspace():
                self.i += 1
            elif text.startswith("//", self.i):
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.i):
                end = text.find("*/", self.i + 2)
                self.i = len(text) if end < 0 else end + 2
            else:
                return

    def string(self) -> str:
        text, quote, j = self.text, self.text[self.i], self.i + 1
        while j < len(text) and text[j] != quote:
            j += 2 if text[j] == "\\" else 1
        token, self.i = text[self.i : j + 1], j + 1
        return token

    def bare(self, stops: str) -> str:
        j, text = self.i, self.text
        while j < len(text) and text[j] not in stops and not text[j].isspace():
            j += 1
        if j == self.i:
            raise _ScanError
        token, self.i = text[self.i : j], j
        return token

    def value(self, path: KeyPath) -> None:
        self.skip()
        char = self.peek()
        if char == "{":
            self.container(path, "}")
        elif char == "[":
            self.container(path, "]")
        elif char in ("'", '"'):
            self.string()
        else:
            self.bare(",]}/")

    def container(self, path: KeyPath, close: str) -> None:
        self.i += 1
        index = 0
        while True:
            self.skip()
            if self.peek() == close:
                self.i += 1
                return
            start = self.i
            key: str | int = index
            if close == "}":
                token = self.string() if self.peek() in ("'", '"') else self.bare(":/")
                key = _decode_key(token)
                self.skip()
                if self.peek() != ":":
                    raise _ScanError
                self.i += 1
            self.locator.record((*path, key), start, unique=close == "}")
            self.value((*path, key))
            self.skip()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != close:
                raise _ScanError
            index += 1


def _decode_key(token: str) -> str:
    if token[:1] in ("'", '"'):
        try:
            decoded = pyjson5.decode(token)
        except pyjson5.Json5Exception:
            return token[1:-1]
        return decoded if isinstance(decoded, str) else token[1:-1]
    return token


def json5_keys(text: str) -> KeyLocator:
    """Locate the keys of a JSON5 document that pyjson5 has already accepted."""
    locator = KeyLocator(text)
    scan = _Json5Scan(text, locator)
    try:
        scan.value(())
    except (_ScanError, IndexError, RecursionError):
        logger.debug("json5 key scan stopped at offset %d", scan.i)
    return locator


_TOML_PART = re.compile(r"[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"|'[^']*'")
_TOML_HEADER = re.compile(r"\s*(\[\[?)([^\]]+)\]")
_TOML_KEY = re.compile(r"\s*((?:[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"|'[^']*'|\s*\.\s*)+?)\s*=")
_TOML_INLINE_KEY = re.compile(r"[{,]\s*([A-Za-z0-9_-]+)\s*=")


def _toml_parts(key: str) -> KeyPath:
    parts: list[str | int] = []
    for part in _TOML_PART.findall(key):
        if part[:1] == '"':
            try:
                part = json.loads(part)
            except ValueError:
                part = part[1:-1]
        elif part[:1] == "'":
            part = part[1:-1]
        parts.append(part)
    return tuple(parts)


def toml_keys(text: str) -> KeyLocator:
    """Locate the keys of a TOML document, line by line (tables, dotted keys, one level of
    inline table); keys inside multi-line arrays fall back to the array's key."""
    locator = KeyLocator(text)
    table: KeyPath = ()
    latest: dict[KeyPath, int] = {}  # array of tables → index of its last element
    in_string = False
    offset = 0
    for line in text.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        fences = line.count('"""') + line.count("'''")
        if in_string:
            in_string = fences % 2 == 0
            continue
        in_string = fences % 2 == 1
        if (header := _TOML_HEADER.match(line)) is not None:
            parts = _toml_parts(header.group(2))
            resolved: KeyPath = ()
            for part in parts[:-1] if header.group(1) == "[[" else parts:
                resolved = (*resolved, part)
                if resolved in latest:
                    resolved = (*resolved, latest[resolved])
            if header.group(1) == "[[":
                resolved = (*resolved, parts[-1])
                locator.record(resolved, start + header.start(2))
                latest[resolved] = latest.get(resolved, -1) + 1
                resolved = (*resolved, latest[resolved])
            locator.record(resolved, start + header.start(2))
            table = resolved
        elif (key := _TOML_KEY.match(line)) is not None:
            path = (*table, *_toml_parts(key.group(1)))
            locator.record(path, start + key.start(1))
            for inner in _TOML_INLINE_KEY.finditer(line, key.end()):
                locator.record((*path, inner.group(1)), start + inner.start(1))
    return locator


# --- the file -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A parsed config file: its values (``${VAR}`` substituted) and where each key is."""

    path: Path
    name: str
    data: dict[str, object]
    locator: KeyLocator
    issues: list[ConfigIssue] = field(default_factory=list)
    #: Keys whose value could not be used (malformed ``${...}``), already in ``issues``.
    bad_paths: list[KeyPath] = field(default_factory=list)


def read_config_file(path: str | os.PathLike[str], environ: Mapping[str, str]) -> ConfigFile:
    """Read, parse and substitute the config file at ``path``.

    Raises ConfigError for anything that stops the file from being read as a whole: an
    unknown extension, a missing or unreadable file, bad UTF-8, a syntax error
    (``file:line:column: message``), a duplicate key or a top level that is not an object.
    Malformed ``${...}`` references are returned in ``issues`` so that other problems are
    reported with them.
    """
    name = os.fspath(path)
    absolute = Path(os.path.abspath(Path(name).expanduser()))
    fmt = FORMATS_BY_SUFFIX.get(absolute.suffix.lower())
    if fmt is None:
        raise ConfigError(
            [
                ConfigIssue(
                    f"unsupported config file extension {absolute.suffix or '(none)'!r}; "
                    "use .json5, .json or .toml",
                    file=name,
                )
            ]
        )
    text = _read_text(absolute, name)
    if fmt == "json5":
        data, locator = _parse_json5(text, name)
    else:
        data, locator = _parse_toml(text, name)
    problems: list[tuple[KeyPath, str]] = []
    # Both steps keep the top level a dict, which the parsers checked.
    data = cast(dict[str, object], canonical_keys(data, HeraldSettings))
    data = cast(dict[str, object], substitute_tree(data, environ, (), problems))
    issues = [_issue_at(locator, name, where, message) for where, message in problems]
    return ConfigFile(absolute, name, data, locator, issues, [where for where, _ in problems])


def _issue_at(locator: KeyLocator, name: str, path: KeyPath, message: str) -> ConfigIssue:
    line, column = locator.find(path) or (None, None)
    return ConfigIssue(message, file=name, key=dotted(path), line=line, column=column)


def dotted(path: KeyPath) -> str:
    """``models.providers.openai.models[0].id`` for a key path."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


def _read_text(path: Path, name: str) -> str:
    def fail(message: str, line: int | None = None, column: int | None = None) -> ConfigError:
        return ConfigError([ConfigIssue(message, file=name, line=line, column=column)])

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise fail("no such file") from None
    except IsADirectoryError:
        raise fail("is a directory, not a config file") from None
    except PermissionError:
        raise fail("permission denied") from None
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        raise fail("not valid UTF-8", line, column) from None
    return text.removeprefix("\ufeff")


def _line_column(text: str, index: int) -> tuple[int, int]:
    index = max(0, min(index, len(text)))
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _json5_message(exc: pyjson5.Json5DecoderException, text: str) -> tuple[str, int]:
    """A readable message and the 0-based index it points at, from pyjson5's error."""
    raw = str(exc.args[0]) if exc.args else str(exc)
    near = re.search(r" near (\d+)", raw)
    offset = int(near.group(1)) if near else len(text)
    message = re.sub(r" near \d+", "", raw)
    message = re.sub(r"b'([^']*)'", r"\1", message)
    message = re.sub(r"U\+([0-9A-Fa-f]{4,6})", lambda m: repr(chr(int(m.group(1), 16))), message)
    message = message.replace("JSON5Value", "a value")
    if isinstance(exc, pyjson5.Json5EOF):
        if message.startswith("No JSON data"):
            return "the file is empty; expected an object", 0
        line, column = _line_column(text, offset - 1)
        kind = re.search(r"nclosed (\w+)", message)
        what = kind.group(1).lower() if kind else "value"
        where = f"line {line}, column {column}"
        return f"unexpected end of file: the {what} opened at {where} is not closed", len(text)
    if isinstance(exc, pyjson5.Json5ExtraData):
        # pyjson5 points just past the value; the extra character follows blanks or comments.
        found = text.find(str(exc.args[2]), offset) if len(exc.args) > 2 else -1
        return "unexpected data after the top-level object", found if found >= 0 else offset
    return message[:1].lower() + message[1:], offset - 1  # pyjson5 counts from 1 here


def _parse_json5(text: str, name: str) -> tuple[dict[str, object], KeyLocator]:
    try:
        data = pyjson5.decode(text)
    except pyjson5.Json5DecoderException as exc:
        message, index = _json5_message(exc, text)
        line, column = _line_column(text, index)
        raise ConfigError([ConfigIssue(message, file=name, line=line, column=column)]) from None
    except (ValueError, RecursionError) as exc:  # defensive: any other parser complaint
        raise ConfigError([ConfigIssue(f"cannot parse: {exc}", file=name)]) from None
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue("the top level must be an object { ... }", file=name)])
    locator = json5_keys(text)
    if locator.duplicates:
        raise ConfigError(
            [
                ConfigIssue(f"duplicate key {path[-1]!r}", name, dotted(path), line, column)
                for path, (line, column) in locator.duplicates
            ]
        )
    return data, locator


_TOML_WHERE = re.compile(
    r"^(?P<message>.*?) \(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$"
)


def _parse_toml(text: str, name: str) -> tuple[dict[str, object], KeyLocator]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_WHERE.match(str(exc))
        message = match.group("message") if match else str(exc)
        if match and match.group("line"):
            line, column = int(match.group("line")), int(match.group("col"))
        else:
            line, column = _line_column(text, len(text))
            message = f"unexpected end of file: {message}"
        message = message[:1].lower() + message[1:]
        raise ConfigError([ConfigIssue(message, file=name, line=line, column=column)]) from None
    except RecursionError:
        raise ConfigError([ConfigIssue("nested too deeply", file=name)]) from None
    return data, toml_keys(text)


# --- the environment ----------------------------------------------------------------------


def _accepts_string(annotation: Any) -> bool:
    inner, _ = unwrap(annotation)
    if inner in (str, SecretStr):
        return True
    return get_origin(inner) is Literal and all(isinstance(a, str) for a in get_args(inner))


def env_value(raw: str, annotation: Any) -> object:
    """An override's value: JSON when it parses as JSON, else the string itself.

    A field that takes a string keeps the text as written (a token ``12345`` stays a string);
    ``null`` clears a field that allows it.
    """
    try:
        parsed: object = json.loads(raw)
    except ValueError:
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
    annotation: Any = HeraldSettings
    path: KeyPath = ()
    for segment in segments:
        if not segment:
            issues.append(ConfigIssue(f"{var}: empty key between '__' separators"))
            return None
        inner, _ = unwrap(annotation)
        model = model_class(inner)
        if model is not None:
            alias = field_alias(model, segment, loose=True)
            if alias is None:
                key = dotted((*path, segment.lower()))
                hint = suggestion(model, segment)
                issues.append(ConfigIssue(f"unknown key (set by {var}); {hint}", key=key))
                return None
            path = (*path, alias)
            annotation = _fields(model)[alias][1].annotation
        elif get_origin(inner) is dict:
            path = (*path, segment.lower())
            annotation = get_args(inner)[1]
        else:
            message = f"has no keys below it; set {dotted(path)} as a whole (in {var})"
            issues.append(ConfigIssue(message, key=dotted(path)))
            return None
    return path


# --- the sources --------------------------------------------------------------------------


class _DataSource(PydanticBaseSettingsSource):
    """A source whose values were read and checked before validation began."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, object]) -> None:
        super().__init__(settings_cls)
        self._data = dict(data)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        key = field.alias or field_name
        return self._data.get(key), key, True

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class ConfigFileSource(_DataSource):
    """Values from the config file (lowest precedence above the defaults)."""


class HeraldEnvSource(_DataSource):
    """Values from ``HERALD_<SECTION>__<KEY>`` environment variables."""


class OverridesSource(_DataSource):
    """Values from command-line flags (highest precedence)."""

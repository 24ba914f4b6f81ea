"""Reading the config file: JSON5 or TOML by extension, syntax errors at line and column.

The file's values come back with snake_case keys renamed to their camelCase alias and
``${VAR}`` substituted, together with a :class:`KeyLocator` that later problems use to name
the line of the key they are about.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import pyjson5

from gateway.config._interpolation import substitute_tree
from gateway.config._positions import KeyLocator, json5_keys, line_column, toml_keys
from gateway.config._schema import KeyPath, canonical_keys, dotted
from gateway.errors import ConfigError, ConfigIssue
from gateway.settings import HeraldSettings

FileFormat = Literal["json5", "toml"]
FORMATS_BY_SUFFIX: dict[str, FileFormat] = {".json5": "json5", ".json": "json5", ".toml": "toml"}


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

    def issue(self, path: KeyPath, message: str) -> ConfigIssue:
        """An issue about the key at ``path``, at its line and column in this file."""
        return _issue_at(self.locator, self.name, path, message)


def _issue_at(locator: KeyLocator, name: str, path: KeyPath, message: str) -> ConfigIssue:
    line, column = locator.find(path) or (None, None)
    return ConfigIssue(message, name, dotted(path) or None, line, column)


def _fail(name: str, message: str, where: tuple[int, int] | None = None) -> ConfigError:
    line, column = where or (None, None)
    return ConfigError([ConfigIssue(message, file=name, line=line, column=column)])


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
        suffix = absolute.suffix or "(none)"
        message = f"unsupported config file extension {suffix!r}; use .json5, .json or .toml"
        raise _fail(name, message)
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


def _read_text(path: Path, name: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise _fail(name, "no such file") from None
    except IsADirectoryError:
        raise _fail(name, "is a directory, not a config file") from None
    except PermissionError:
        raise _fail(name, "permission denied") from None
    except OSError as exc:
        raise _fail(name, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        raise _fail(name, "not valid UTF-8", (line, column)) from None
    return text.removeprefix("\ufeff")


# --- JSON5 ---------------------------------------------------------------------------------


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
        line, column = line_column(text, offset - 1)
        kind = re.search(r"nclosed (\w+)", message)
        what = kind.group(1).lower() if kind else "value"
        where = f"line {line}, column {column}"
        return f"unexpected end of file: the {what} opened at {where} is not closed", len(text)
    if isinstance(exc, pyjson5.Json5ExtraData):
        # pyjson5 points just past the value; the extra character follows blanks or comments.
        found = text.find(str(exc.args[2]), offset) if len(exc.args) > 2 else -1
        return "unexpected data after the top-level object", found if found >= 0 else offset
    return message[:1].lower() + message[1:], offset - 1  # pyjson5 counts from 1 here


def _overflow_issue(exc: pyjson5.Json5DecoderException, text: str, name: str) -> ConfigIssue | None:
    """The issue for a number too large to be finite (``1e999``), naming its key.

    pyjson5 reports such a number as an unclosed literal; the partial result it carries ends
    at the key whose value it was reading.
    """
    raw = str(exc.args[0]) if exc.args else ""
    near = re.search(r"NumericLiteral' starting near (\d+)", raw)
    if not isinstance(exc, pyjson5.Json5EOF) or near is None:
        return None
    index = int(near.group(1)) - 1
    literal = re.match(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", text[index:])
    if literal is None or not math.isinf(float(literal.group())):
        return None
    path: list[str | int] = []
    partial = exc.args[1] if len(exc.args) > 1 else None
    while isinstance(partial, dict | list) and partial:
        last: str | int = next(reversed(partial)) if isinstance(partial, dict) else len(partial) - 1
        path.append(last)
        partial = partial[last]  # type: ignore[index]
    line, column = line_column(text, index)
    message = f"number {literal.group()} is out of range (numbers must be finite)"
    return ConfigIssue(message, name, dotted(tuple(path)) or None, line, column)


def _parse_json5(text: str, name: str) -> tuple[dict[str, object], KeyLocator]:
    try:
        data = pyjson5.decode(text)
    except pyjson5.Json5DecoderException as exc:
        if (overflow := _overflow_issue(exc, text, name)) is not None:
            raise ConfigError([overflow]) from None
        message, index = _json5_message(exc, text)
        raise _fail(name, message, line_column(text, index)) from None
    except (ValueError, RecursionError) as exc:  # defensive: any other parser complaint
        raise _fail(name, f"cannot parse: {exc}") from None
    if not isinstance(data, dict):
        raise _fail(name, "the top level must be an object { ... }")
    locator = json5_keys(text)
    if locator.duplicates:
        raise ConfigError(
            [
                ConfigIssue(f"duplicate key {path[-1]!r}", name, dotted(path), line, column)
                for path, (line, column) in locator.duplicates
            ]
        )
    return data, locator


# --- TOML ----------------------------------------------------------------------------------

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
            where = int(match.group("line")), int(match.group("col"))
        else:
            where = line_column(text, len(text))
            message = f"unexpected end of file: {message}"
        raise _fail(name, message[:1].lower() + message[1:], where) from None
    except RecursionError:
        raise _fail(name, "nested too deeply") from None
    return data, toml_keys(text)

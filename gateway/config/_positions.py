"""Where keys are in a config file's text, for error messages (``file:line:column``).

Neither parser says where a key is: pyjson5 and tomllib return plain dicts. TOML is located
with tomllib itself: the file is cut into the shortest runs of lines that tomllib accepts on
their own (one statement each), so tables, arrays of tables, multi-line strings and quoted
keys are understood by the real parser; only the column of a key inside a statement is
found by searching the statement's text. JSON5 has no such line structure, and pyjson5
silently keeps the last of two equal keys, so a small scanner walks the (already accepted)
text to record each key and to catch duplicates. Both are best effort: a key that was not
found is reported at its nearest enclosing key.
"""

from __future__ import annotations

import logging
import re
import tomllib
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import pyjson5

from gateway.config._schema import KeyPath, loose

logger = logging.getLogger(__name__)

#: A 1-based (line, column).
Position = tuple[int, int]


def line_column(text: str, index: int) -> Position:
    """The 1-based line and column of ``text[index]`` (clamped to the text)."""
    index = max(0, min(index, len(text)))
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _loose_path(path: KeyPath) -> KeyPath:
    return tuple(loose(k) if isinstance(k, str) else k for k in path)


class KeyLocator:
    """Line and column of each key in a config file's text.

    Spellings match loosely (``state_dir`` finds ``stateDir``); the first occurrence of a
    key wins. ``scan`` fills the locator; it runs when first needed unless ``eager``.
    """

    def __init__(
        self, text: str, scan: Callable[[KeyLocator, str], None], *, eager: bool = False
    ) -> None:
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self._exact: dict[KeyPath, Position] = {}
        self._loose: dict[KeyPath, Position] = {}
        self._pending: tuple[Callable[[KeyLocator, str], None], str] | None = (scan, text)
        #: Keys written twice in one object, at their second occurrence.
        self.duplicates: list[tuple[KeyPath, Position]] = []
        if eager:
            self._run_scan()

    def _run_scan(self) -> None:
        if self._pending is not None:
            scan, text = self._pending
            self._pending = None
            scan(self, text)

    def position(self, index: int) -> Position:
        """The line and column of offset ``index`` in the text."""
        line = bisect_right(self._line_starts, index)
        return line, index - self._line_starts[line - 1] + 1

    def record(self, path: KeyPath, index: int, *, unique: bool = False) -> None:
        """Note that ``path`` is at offset ``index``; ``unique`` keys may not repeat."""
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
        self._run_scan()
        for end in range(len(path), 0, -1):
            found = self._exact.get(path[:end]) or self._loose.get(_loose_path(path[:end]))
            if found is not None:
                return found
        return None


# --- JSON5 ---------------------------------------------------------------------------------


class _ScanError(Exception):
    pass


class _Json5Scan:
    """Walks JSON5 text recording every object key and array element."""

    def __init__(self, text: str, locator: KeyLocator) -> None:
        self.text, self.i, self.locator = text, 0, locator

    def peek(self) -> str:
        return self.text[self.i : self.i + 1]

    def skip(self) -> None:
        """Past blanks and comments."""
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
        if char in ("{", "["):
            self.container(path, "}" if char == "{" else "]")
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


def _scan_json5(locator: KeyLocator, text: str) -> None:
    scan = _Json5Scan(text, locator)
    try:
        scan.value(())
    except (_ScanError, IndexError, RecursionError):
        logger.debug("json5 key scan stopped at offset %d", scan.i)


def json5_keys(text: str) -> KeyLocator:
    """Locate the keys of a JSON5 document that pyjson5 has already accepted.

    Scanned at once, so that ``duplicates`` is complete.
    """
    return KeyLocator(text, _scan_json5, eager=True)


# --- TOML ----------------------------------------------------------------------------------

_HEADER = re.compile(r"\s*\[\[?\s*")


def _key_at(key: str) -> re.Pattern[str]:
    """A key as written before ``=`` or ``.``: bare, or in quotes without escapes."""
    k = re.escape(key)
    return re.compile(rf"(?<![\w\"'-])(?:{k}|\"{k}\"|'{k}')(?=\s*[=.])")


def _record_keys(
    locator: KeyLocator,
    value: dict[str, Any],
    path: KeyPath,
    text: str,
    start: int,
    cursor: int,
    anchor: int | None,
) -> int:
    """Record the keys of ``value``, searched in ``text`` from ``cursor``; the offset after.

    ``text`` is one statement at offset ``start`` of the file. A key right after ``.``
    continues a dotted key (``auth.token``) and is reported where that key begins (``anchor``).
    """
    for key, item in value.items():
        match = _key_at(key).search(text, cursor)
        if match is None:
            continue
        continues = anchor is not None and text[cursor : match.start()].strip() == "."
        where = anchor if continues and anchor is not None else match.start()
        locator.record((*path, key), start + where)
        cursor = match.end()
        if isinstance(item, dict):
            cursor = _record_keys(locator, item, (*path, key), text, start, cursor, where)
        elif isinstance(item, list) and item and all(isinstance(i, dict) for i in item):
            for index, element in enumerate(item):  # an array of inline tables
                brace = text.find("{", cursor)
                if brace < 0:
                    break
                item_path = (*path, key, index)
                locator.record(item_path, start + brace)
                cursor = _record_keys(locator, element, item_path, text, start, brace, None)
    return cursor


def _scan_toml(locator: KeyLocator, text: str) -> None:
    table: KeyPath = ()
    arrays: dict[KeyPath, int] = {}  # array of tables → index of its last element
    ends = [m.end() for m in re.finditer(r"\n", text)]
    if not ends or ends[-1] < len(text):
        ends.append(len(text))
    start = 0
    for end in ends:
        statement = text[start:end]
        try:
            parsed = tomllib.loads(statement)
        except (tomllib.TOMLDecodeError, RecursionError):
            continue  # not a whole statement yet: take in the next line
        header = _HEADER.match(statement)
        if header is not None and parsed:
            table = _table(locator, parsed, arrays, start + header.end())
        elif parsed:
            _record_keys(locator, parsed, table, statement, start, 0, None)
        start = end


def _table(
    locator: KeyLocator, parsed: dict[str, Any], arrays: dict[KeyPath, int], at: int
) -> KeyPath:
    """The key path a ``[table]`` or ``[[array]]`` header opens, recorded at offset ``at``."""
    resolved: KeyPath = ()
    node: Any = parsed
    while isinstance(node, dict) and node:
        key, node = next(iter(node.items()))
        resolved = (*resolved, key)
        if isinstance(node, list):  # the header's own array of tables: a new element
            arrays[resolved] = arrays.get(resolved, -1) + 1
            locator.record(resolved, at)
            node = node[0] if node else None
        if resolved in arrays:
            resolved = (*resolved, arrays[resolved])
        locator.record(resolved, at)
    return resolved


def toml_keys(text: str) -> KeyLocator:
    """Locate the keys of a TOML document that tomllib has already accepted.

    Tables, arrays of tables, dotted keys and inline tables are found; keys inside arrays
    other than arrays of inline tables fall back to the array's key. Scanned when first asked.
    """
    return KeyLocator(text, _scan_toml)

"""Typed errors of the gateway. Each carries the data needed to print it well."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a configuration: where it is and what is wrong.

    ``key`` is the dotted key path (``agent.subagents.maxConcurrent``); ``line`` and
    ``column`` are 1-based positions in ``file`` when known.
    """

    message: str
    file: str | None = None
    key: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class HeraldError(Exception):
    """Base class of Herald's own errors."""


class ConfigError(HeraldError):
    """The configuration cannot be used; ``issues`` lists every problem found."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))

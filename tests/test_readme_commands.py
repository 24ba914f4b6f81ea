"""Every command line and config snippet the README shows passes the checks ``herald run``
makes before it starts, so the README cannot drift from the code: each ``make run`` line with
its variables (fake tokens) is loaded with the config file ``make run`` uses, and each
``json5`` snippet is loaded as a config file of its own."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gateway.config import load_settings
from gateway.preflight import preflight

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README) if lang == language]


def make_config() -> Path:
    """The config file ``make run`` passes (the Makefile's ``CONFIG`` default)."""
    match = re.search(r"^CONFIG \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "the Makefile sets no CONFIG default"
    return ROOT / match.group(1)


def run_lines() -> list[str]:
    lines = []
    for body in blocks("sh"):
        for raw in body.splitlines():
            line = raw.split(" #", 1)[0].strip()
            if line and not line.startswith("#") and "make run" in line:
                lines.append(line)
    return lines


def test_the_readme_shows_make_run_lines() -> None:
    assert len(run_lines()) >= 4  # the quick start, two providers, Slack and Discord


@pytest.mark.parametrize("line", run_lines())
def test_a_make_run_line_of_the_readme_passes_the_start_up_checks(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = shlex.split(line)
    env = {"HOME": str(tmp_path), "HERALD_GATEWAY__STATE_DIR": str(tmp_path / "state")}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[:2] == ["make", "run"], line
    monkeypatch.chdir(ROOT)
    preflight(load_settings(make_config(), environ=env))


@pytest.mark.parametrize("snippet", blocks("json5"))
def test_a_config_snippet_of_the_readme_loads(snippet: str, tmp_path: Path) -> None:
    path = tmp_path / "herald.json5"
    path.write_text("{\n" + snippet + "\n}\n", encoding="utf-8")
    env = {"HOME": str(tmp_path), "HERALD_GATEWAY__STATE_DIR": str(tmp_path / "state")}
    preflight(load_settings(path, environ=env))

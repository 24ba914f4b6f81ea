"""Parsing, locating keys, ``${VAR}`` and environment overrides (gateway/config_sources.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config_sources import (
    Unresolved,
    annotation_at,
    env_overrides,
    env_value,
    json5_keys,
    read_config_file,
    substitute,
    toml_keys,
)
from gateway.errors import ConfigError, ConfigIssue

WriteFile = Callable[[str, str | bytes], Path]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return _write


def only_issue(excinfo: pytest.ExceptionInfo[ConfigError]) -> ConfigIssue:
    assert len(excinfo.value.issues) == 1, excinfo.value.issues
    return excinfo.value.issues[0]


# --- ${VAR} --------------------------------------------------------------------------------


def test_substitute_replaces_variables_inside_text() -> None:
    env = {"HOST": "example.org", "PORT": "443"}
    assert substitute("https://${HOST}:${PORT}/v1", env) == "https://example.org:443/v1"


def test_substitute_default_applies_when_unset_or_empty() -> None:
    assert substitute("${A:-fallback}", {}) == "fallback"
    assert substitute("${A:-fallback}", {"A": ""}) == "fallback"
    assert substitute("${A:-fallback}", {"A": "set"}) == "set"
    assert substitute("${A:-}", {}) == ""


def test_substitute_empty_variable_without_default_is_empty_not_missing() -> None:
    assert substitute("${A}", {"A": ""}) == ""


def test_substitute_missing_variable_makes_the_value_unresolved() -> None:
    assert substitute("Bearer ${TOKEN}", {}) == Unresolved("TOKEN")


def test_substitute_double_dollar_is_a_literal() -> None:
    assert substitute("$${HOME}/x and $5", {"HOME": "/root"}) == "${HOME}/x and $5"


@pytest.mark.parametrize("text", ["${UNCLOSED", "${1BAD}", "${}", "a ${B C}"])
def test_substitute_rejects_malformed_references(text: str) -> None:
    with pytest.raises(ValueError, match="malformed variable reference"):
        substitute(text, {"UNCLOSED": "x"})


# --- syntax errors: file:line:column ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("{\n  gateway: { port: 1,, },\n}\n", 2, 22, "stray comma"),
        ("{\n  gateway: { port 1 },\n}\n", 2, 19, "expected colon"),
        ("{\n  agent: { model: @ },\n}\n", 2, 19, "expected a value"),
        ("{\n  // 😀 an emoji counts as one column\n  a: 1 2\n}", 3, 8, "expected"),
        ("{\n  gateway: {\n    port: 1,\n", 4, 1, "object opened at line 2, column 12"),
        ("{ a: 'open string\n", 2, 1, "string opened at line 1, column 6"),
        ("{ a: 1 }\n\n  ]", 3, 3, "unexpected data after the top-level object"),
        ("", 1, 1, "the file is empty"),
    ],
)
def test_json5_syntax_errors_name_line_and_column(
    write: WriteFile, text: str, line: int, column: int, fragment: str
) -> None:
    path = write("herald.json5", text)
    with pytest.raises(ConfigError) as excinfo:
        read_config_file(path, {})
    issue = only_issue(excinfo)
    assert (issue.file, issue.line, issue.column) == (str(path), line, column)
    assert fragment in issue.message
    assert str(issue).startswith(f"{path}:{line}:{column}: ")


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("[gateway]\nport = \n", 2, 8, "invalid value"),
        ("[gateway]\nport = 1\nport = 2\n", 3, 9, "cannot overwrite a value"),
        ("[gateway\nport = 1\n", 1, 9, "expected ']'"),
        ('[agent]\nmodel = "demo/scripted\n', 2, 23, "illegal character"),
        ("[gateway]\nport = [1,", 2, 11, "unexpected end of file"),
    ],
)
def test_toml_syntax_errors_name_line_and_column(
    write: WriteFile, text: str, line: int, column: int, fragment: str
) -> None:
    path = write("herald.toml", text)
    with pytest.raises(ConfigError) as excinfo:
        read_config_file(path, {})
    issue = only_issue(excinfo)
    assert (issue.line, issue.column) == (line, column)
    assert fragment in issue.message.lower()
    assert "(at line" not in issue.message  # tomllib's own suffix is normalised away


def test_json5_duplicate_key_is_an_error_at_the_second_occurrence(write: WriteFile) -> None:
    path = write("herald.json5", "{\n  gateway: { port: 1 },\n  gateway: { port: 2 },\n}\n")
    with pytest.raises(ConfigError) as excinfo:
        read_config_file(path, {})
    issue = only_issue(excinfo)
    assert (issue.line, issue.column, issue.key) == (3, 3, "gateway")
    assert "duplicate key 'gateway'" in issue.message


@pytest.mark.parametrize("text", ["[1, 2]", '"text"', "42", "null"])
def test_json5_top_level_must_be_an_object(write: WriteFile, text: str) -> None:
    with pytest.raises(ConfigError, match="top level must be an object"):
        read_config_file(write("herald.json5", text), {})


def test_unknown_extension_names_the_accepted_ones(write: WriteFile) -> None:
    path = write("herald.yaml", "gateway: {}\n")
    with pytest.raises(ConfigError) as excinfo:
        read_config_file(path, {})
    issue = only_issue(excinfo)
    assert issue.file == str(path)
    assert ".json5, .json or .toml" in issue.message
    assert "'.yaml'" in issue.message


def test_dot_json_is_read_as_json5(write: WriteFile) -> None:
    config = read_config_file(write("herald.JSON", "{gateway: {port: 9000}} // comment"), {})
    assert config.data == {"gateway": {"port": 9000}}


def test_unreadable_files_are_config_errors(write: WriteFile, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        read_config_file(tmp_path / "missing.json5", {})
    (tmp_path / "dir.json5").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        read_config_file(tmp_path / "dir.json5", {})


def test_bad_utf8_names_line_and_column(write: WriteFile) -> None:
    path = write("herald.json5", b'{\n  gateway: { host: "ab\xff" },\n}\n')
    with pytest.raises(ConfigError) as excinfo:
        read_config_file(path, {})
    issue = only_issue(excinfo)
    assert (issue.line, issue.column, issue.message) == (2, 23, "not valid UTF-8")


def test_byte_order_mark_is_accepted(write: WriteFile) -> None:
    config = read_config_file(write("herald.json5", "\ufeff{gateway: {port: 1}}"), {})
    assert config.data == {"gateway": {"port": 1}}


def test_file_values_are_substituted_and_snake_case_keys_canonical(write: WriteFile) -> None:
    text = '{gateway: {state_dir: "${HOME}/state", auth: {token: "${MISSING}"}}}'
    config = read_config_file(write("herald.json5", text), {"HOME": "/home/h"})
    assert config.data == {
        "gateway": {"stateDir": "/home/h/state", "auth": {"token": Unresolved("MISSING")}}
    }
    assert config.path.is_absolute()


def test_malformed_reference_in_the_file_is_an_issue_at_its_key(write: WriteFile) -> None:
    config = read_config_file(write("herald.json5", '{\n  agent: { model: "${MODEL" },\n}'), {})
    assert [(i.key, i.line, i.column) for i in config.issues] == [("agent.model", 2, 12)]
    assert config.bad_paths == [("agent", "model")]


# --- locating keys ------------------------------------------------------------------------


def test_json5_locator_finds_nested_keys_list_items_and_falls_back() -> None:
    text = (
        "{\n"
        "  // a comment with { braces: and colons }\n"
        '  "gateway": { host: "a:b}", port: 1 },\n'
        "  models: { providers: { demo: { models: [\n"
        "    { id: 'x', /* block */ cost: { input: 1 } },\n"
        "  ] } } },\n"
        "}\n"
    )
    locator = json5_keys(text)
    assert locator.find(("gateway",)) == (3, 3)
    assert locator.find(("gateway", "port")) == (3, 30)
    assert locator.find(("models", "providers", "demo", "models", 0)) == (5, 5)
    assert locator.find(("models", "providers", "demo", "models", 0, "cost", "input")) == (5, 36)
    # Not in the text: the nearest enclosing key.
    assert locator.find(("gateway", "auth", "token")) == (3, 3)
    assert locator.find(("channels",)) is None


def test_json5_locator_matches_snake_case_spelling_loosely() -> None:
    locator = json5_keys("{gateway: {state_dir: 'x'}}")
    assert locator.find(("gateway", "stateDir")) == (1, 12)


def test_toml_locator_handles_tables_arrays_of_tables_and_inline_tables() -> None:
    text = (
        "[gateway]\n"
        "port = 1\n"
        "auth.token = 'x'\n"
        'note = """\n'
        "fake = 1\n"
        '"""\n'
        "[[models.providers.demo.models]]\n"
        'id = "a"\n'
        "[[models.providers.demo.models]]\n"
        'id = "b"\n'
        "cost = { input = 1, output = 2 }\n"
        "[models.providers.demo.models.extra]\n"
        "x = 1\n"
    )
    locator = toml_keys(text)
    assert locator.find(("gateway", "port")) == (2, 1)
    assert locator.find(("gateway", "auth", "token")) == (3, 1)
    assert locator.find(("gateway", "fake")) == (1, 2)  # inside a multi-line string: not a key
    assert locator.find(("models", "providers", "demo", "models", 0, "id")) == (8, 1)
    assert locator.find(("models", "providers", "demo", "models", 1, "id")) == (10, 1)
    assert locator.find(("models", "providers", "demo", "models", 1, "cost", "output")) == (11, 21)
    assert locator.find(("models", "providers", "demo", "models", 1, "extra", "x")) == (13, 1)


# --- environment overrides ----------------------------------------------------------------


def test_env_value_parses_json_but_keeps_text_for_string_fields() -> None:
    assert env_value("9000", annotation_at(("gateway", "port"))) == 9000
    assert env_value('["exec"]', annotation_at(("agent", "tools", "deny"))) == ["exec"]
    assert env_value("true", annotation_at(("channels", "slack", "enabled"))) is True
    assert env_value("12345", annotation_at(("channels", "discord", "token"))) == "12345"
    assert env_value("true", annotation_at(("gateway", "host"))) == "true"
    assert env_value("null", annotation_at(("agent", "subagents", "model"))) is None
    assert env_value("null", annotation_at(("gateway", "host"))) == "null"
    assert env_value("0.0.0.0", annotation_at(("gateway", "host"))) == "0.0.0.0"


def test_env_overrides_map_segments_loosely_and_dict_keys_lowercased() -> None:
    found = env_overrides(
        {
            "HERALD_GATEWAY__STATE_DIR": "/srv",
            "HERALD_agent__subagents__MAXCONCURRENT": "3",
            "HERALD_ROUTING__AGENTS__HELPER__MODEL": "demo/scripted",
            "HERALD_CONFIG": "ignored.json5",
            "HERALD_TOKEN": "ignored",
            "OTHER__THING": "ignored",
        }
    )
    assert found.issues == []
    assert found.data == {
        "gateway": {"stateDir": "/srv"},
        "agent": {"subagents": {"maxConcurrent": 3}},
        "routing": {"agents": {"helper": {"model": "demo/scripted"}}},
    }
    assert found.origins[("gateway", "stateDir")] == "HERALD_GATEWAY__STATE_DIR"


def test_env_override_of_unknown_key_names_the_variable_and_suggests() -> None:
    found = env_overrides({"HERALD_GATEWAY__PROT": "1", "HERALD_ROUTING__AGENTS__MAIN__MODLE": "x"})
    messages = [str(issue) for issue in found.issues]
    assert messages == [
        "gateway.prot: unknown key (set by HERALD_GATEWAY__PROT); did you mean 'port'?",
        "routing.agents.main.modle: unknown key (set by HERALD_ROUTING__AGENTS__MAIN__MODLE); "
        "did you mean 'model'?",
    ]
    assert found.data == {}


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n"),
        ("deep.json5", "[" * 5000 + "]" * 5000),
    ],
)
def test_absurd_nesting_is_a_config_error(write: WriteFile, name: str, text: str) -> None:
    with pytest.raises(ConfigError, match="nest"):
        read_config_file(write(name, text), {})

"""Reading the config file: formats, syntax errors at line and column (gateway/config/_file.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config._file import read_config_file
from gateway.config._interpolation import Unresolved
from gateway.errors import ConfigError, ConfigIssue
from tests.gateway.conftest import WriteFile


def only_issue(excinfo: pytest.ExceptionInfo[ConfigError]) -> ConfigIssue:
    assert len(excinfo.value.issues) == 1, excinfo.value.issues
    return excinfo.value.issues[0]


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
    ("text", "line", "column", "key", "number"),
    [
        ("{\n  agent: { timeoutSeconds: -1e999 },\n}", 2, 28, "agent.timeoutSeconds", "-1e999"),
        (
            "{models: {providers: {x: {models: [{id: 'a'}, {cost: {input: 2.5E+400}}]}}}}",
            1,
            62,
            "models.providers.x.models[1].cost.input",
            "2.5E+400",
        ),
    ],
)
def test_json5_number_too_large_to_be_finite_names_its_key(
    write: WriteFile, text: str, line: int, column: int, key: str, number: str
) -> None:
    # pyjson5 itself calls it an unclosed literal, which sends the reader to the wrong place.
    path = write("herald.json5", text)
    with pytest.raises(ConfigError) as excinfo:
        read_config_file(path, {})
    assert str(only_issue(excinfo)) == (
        f"{path}:{line}:{column}: {key}: number {number} is out of range (numbers must be finite)"
    )


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


def test_malformed_reference_in_a_toml_file_is_an_issue_at_its_key(write: WriteFile) -> None:
    config = read_config_file(write("herald.toml", '[agent]\n\nmodel = "${MODEL"\n'), {})
    assert [(i.key, i.line, i.column) for i in config.issues] == [("agent.model", 3, 1)]


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

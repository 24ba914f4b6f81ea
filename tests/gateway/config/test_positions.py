"""Where keys are in the text, for error messages (gateway/config/_positions.py)."""

from __future__ import annotations

from gateway.config._positions import json5_keys, line_column, toml_keys


def test_line_column_counts_from_one_and_clamps() -> None:
    text = "ab\ncd\n"
    assert line_column(text, 0) == (1, 1)
    assert line_column(text, 4) == (2, 2)
    assert line_column(text, 99) == (3, 1)
    assert line_column(text, -5) == (1, 1)


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


def test_json5_locator_lists_duplicates_once_at_their_second_occurrence() -> None:
    locator = json5_keys("{a: {b: 1, b: 2}, c: {d: 1},\n c: {d: 2}}")
    assert locator.duplicates == [(("a", "b"), (1, 12)), (("c",), (2, 2))]


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


def test_toml_locator_reads_multi_line_arrays_quoted_keys_and_dotted_inline_keys() -> None:
    text = (
        "# a comment: x = 1\n"
        "deny = [\n"
        '  "exec",\n'
        "]\n"
        "models = [\n"
        '  { id = "a", cost = { input = 1 } },\n'
        '  { id = "b" },\n'
        "]\n"
        '"odd key".inner = { a.b = 1, c = 2 }\n'
        "after = 1\n"
    )
    locator = toml_keys(text)
    assert locator.find(("x",)) is None  # in a comment
    assert locator.find(("deny", 0)) == (2, 1)  # a list of plain values: the list's key
    assert locator.find(("models", 0, "cost", "input")) == (6, 24)
    assert locator.find(("models", 1, "id")) == (7, 5)
    assert locator.find(("odd key", "inner")) == (9, 1)
    assert locator.find(("odd key", "inner", "a", "b")) == (9, 21)
    assert locator.find(("odd key", "inner", "c")) == (9, 30)
    assert locator.find(("after",)) == (10, 1)


def test_toml_locator_matches_snake_case_spelling_loosely() -> None:
    locator = toml_keys("[gateway]\nstate_dir = 'x'\n")
    assert locator.find(("gateway", "stateDir")) == (2, 1)

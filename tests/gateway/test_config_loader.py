"""Loading: precedence, environment overrides, ${VAR}, and one clear issue per mistake."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from pydantic import SecretStr

from gateway.config import LoadedSettings, load_settings
from gateway.errors import ConfigError, ConfigIssue
from gateway.settings import HeraldSettings
from tests.gateway.conftest import WriteFile


def issues_of(
    path: Path | None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as excinfo:
        load_settings(path, environ=environ or {}, overrides=overrides)
    return excinfo.value.issues


def one_issue(
    path: Path | None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> ConfigIssue:
    issues = issues_of(path, environ, overrides)
    assert len(issues) == 1, [str(i) for i in issues]
    return issues[0]


def secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()


# --- where settings come from -------------------------------------------------------------


def test_no_file_gives_the_embedded_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load_settings(environ={})
    assert loaded == LoadedSettings(HeraldSettings(), None, tmp_path, frozenset())
    assert type(loaded.settings) is HeraldSettings


def test_herald_config_names_the_file_and_an_explicit_path_wins(write: WriteFile) -> None:
    from_env = write("env.json5", "{gateway: {port: 1111}}")
    explicit = write("explicit.toml", "[gateway]\nport = 2222\n")
    loaded = load_settings(environ={"HERALD_CONFIG": str(from_env)})
    assert (loaded.settings.gateway.port, loaded.path) == (1111, from_env)
    loaded = load_settings(explicit, environ={"HERALD_CONFIG": str(from_env)})
    assert (loaded.settings.gateway.port, loaded.path) == (2222, explicit)
    assert loaded.config_dir == explicit.parent


def test_relative_path_is_made_absolute(write: WriteFile, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write("herald.json5", "{}")
    monkeypatch.chdir(path.parent)
    loaded = load_settings("herald.json5", environ={})
    assert loaded.path == path
    assert loaded.path.is_absolute()
    assert loaded.config_dir == path.parent


def test_precedence_is_flags_then_environment_then_file_then_defaults(write: WriteFile) -> None:
    path = write("herald.json5", "{gateway: {port: 1000, host: 'localhost'}}")
    env = {"HERALD_GATEWAY__PORT": "2000"}
    flags = {"gateway": {"port": 3000}}
    assert load_settings(path, environ={}).settings.gateway.port == 1000
    assert load_settings(path, environ=env).settings.gateway.port == 2000
    settings = load_settings(path, environ=env, overrides=flags).settings
    assert (settings.gateway.port, settings.gateway.host) == (3000, "localhost")
    assert settings.gateway.shutdown_drain_seconds == 10.0  # the default, untouched


def test_environment_overrides_merge_into_file_sections(write: WriteFile) -> None:
    path = write("herald.json5", "{routing: {agents: {main: {name: 'Main', model: null}}}}")
    env = {
        "HERALD_ROUTING__AGENTS__MAIN__SYSTEM_PROMPT": "Be brief.",
        "HERALD_GATEWAY__STATEDIR": "/srv/herald",
        "HERALD_AGENT__TOOLS__DENY": '["exec", "web_fetch"]',
        "HERALD_CHANNELS__WEBCHAT__ENABLED": "false",
        "HERALD_CHANNELS__DISCORD__TOKEN": "12345",
        "HERALD_TOKEN": "not-an-override",
    }
    settings = load_settings(path, environ=env).settings
    main = settings.routing.agents["main"]
    assert (main.name, main.system_prompt) == ("Main", "Be brief.")
    assert settings.gateway.state_dir == "/srv/herald"
    assert settings.agent.tools.deny == ["exec", "web_fetch"]
    assert settings.channels.webchat.enabled is False
    assert secret(settings.channels.discord.token) == "12345"
    assert settings.gateway.auth.token is None


def test_snake_case_file_keys_are_overridden_by_the_environment(write: WriteFile) -> None:
    path = write("herald.json5", "{gateway: {state_dir: '/from/file'}}")
    loaded = load_settings(path, environ={"HERALD_GATEWAY__STATE_DIR": "/from/env"})
    assert loaded.settings.gateway.state_dir == "/from/env"


def test_herald_settings_itself_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT", '{"model": "nope"}')
    monkeypatch.setenv("GATEWAY", "not json")
    assert HeraldSettings() == load_settings(environ={}).settings


# --- ${VAR} -------------------------------------------------------------------------------


def test_variables_and_defaults_are_substituted(write: WriteFile) -> None:
    path = write(
        "herald.json5",
        "{gateway: {port: '${PORT:-9001}', stateDir: '${BASE}/state',"
        " auth: {token: '${HERALD_TOKEN}'}}}",
    )
    settings = load_settings(path, environ={"BASE": "/data", "HERALD_TOKEN": "t0k"}).settings
    assert (settings.gateway.port, settings.gateway.state_dir) == (9001, "/data/state")
    assert secret(settings.gateway.auth.token) == "t0k"


def test_missing_variable_names_file_line_key_and_variable(write: WriteFile) -> None:
    path = write("herald.json5", "{\n  agent: {\n    model: '${MODEL}',\n  },\n}\n")
    issue = one_issue(path)
    assert (issue.file, issue.line, issue.column, issue.key) == (str(path), 3, 5, "agent.model")
    assert issue.message == "environment variable MODEL is not set"


def test_missing_variable_in_an_environment_value_names_the_variable() -> None:
    issue = one_issue(None, {"HERALD_AGENT__MODEL": "${MODEL}"})
    assert issue.key == "agent.model"
    assert issue.file is None
    assert "MODEL is not set" in issue.message
    assert "HERALD_AGENT__MODEL" in issue.message


SECRETS_FILE = """{
  gateway: { auth: { token: "${HERALD_TOKEN}" } },
  models: { providers: {
    demo: { api: "scripted", models: [{ id: "scripted" }] },
    openai: { api: "openai-completions", apiKey: "${OPENAI_API_KEY}", models: [{ id: "gpt" }] },
  } },
  channels: {
    slack: { enabled: false, botToken: "${SLACK_BOT_TOKEN}", appToken: "${SLACK_APP_TOKEN}" },
  },
}
"""


def test_secrets_nothing_needs_are_left_unset_and_listed(write: WriteFile) -> None:
    loaded = load_settings(write("herald.json5", SECRETS_FILE), environ={})
    assert loaded.unset_secrets == {
        "gateway.auth.token",
        "models.providers.openai.apiKey",
        "channels.slack.botToken",
        "channels.slack.appToken",
    }
    assert loaded.settings.models.providers["openai"].api_key is None
    assert loaded.settings.channels.slack.bot_token is None


def test_secret_of_a_provider_a_model_uses_is_required(write: WriteFile) -> None:
    path = write("herald.json5", SECRETS_FILE)
    issue = one_issue(path, {"HERALD_ROUTING__AGENTS__MAIN__MODEL": "openai/gpt"})
    assert (issue.line, issue.column, issue.key) == (5, 42, "models.providers.openai.apiKey")
    assert issue.message == (
        "environment variable OPENAI_API_KEY is not set "
        "(routing.agents.main.model uses provider 'openai')"
    )


def test_secrets_of_an_enabled_channel_are_required(write: WriteFile) -> None:
    path = write("herald.json5", SECRETS_FILE)
    issues = issues_of(path, {"HERALD_CHANNELS__SLACK__ENABLED": "true"})
    assert [(i.line, i.key) for i in issues] == [
        (8, "channels.slack.botToken"),
        (8, "channels.slack.appToken"),
    ]
    assert all("channels.slack.enabled is true" in i.message for i in issues)


def test_a_missing_variable_does_not_matter_where_the_environment_sets_the_key(
    write: WriteFile,
) -> None:
    env = {
        "HERALD_CHANNELS__SLACK__ENABLED": "true",
        "HERALD_CHANNELS__SLACK__BOT_TOKEN": "xoxb-from-env",
        "SLACK_APP_TOKEN": "xapp-1",
    }
    loaded = load_settings(write("herald.json5", SECRETS_FILE), environ=env)
    assert secret(loaded.settings.channels.slack.bot_token) == "xoxb-from-env"
    assert "channels.slack.botToken" not in loaded.unset_secrets


def test_enabled_channel_without_its_secrets_is_an_error(write: WriteFile) -> None:
    path = write(
        "herald.json5", "{channels: {slack: {enabled: true, mode: 'http', botToken: 'x'}}}"
    )
    issue = one_issue(path)
    assert issue.key == "channels.slack.signingSecret"
    assert "required when channels.slack.enabled is true and mode is 'http'" in issue.message


def test_unset_token_off_loopback_is_an_error_that_names_its_variable(write: WriteFile) -> None:
    path = write("herald.json5", SECRETS_FILE)
    issue = one_issue(path, overrides={"gateway": {"host": "0.0.0.0"}})
    assert (issue.line, issue.key) == (2, "gateway.auth.token")
    assert "required when gateway.host (0.0.0.0) is not a loopback address" in issue.message
    assert "HERALD_TOKEN is not set" in issue.message


def test_non_loopback_host_with_a_token_loads(write: WriteFile) -> None:
    path = write("herald.json5", SECRETS_FILE)
    env = {"HERALD_GATEWAY__HOST": "0.0.0.0", "HERALD_TOKEN": "s3cret"}
    assert secret(load_settings(path, environ=env).settings.gateway.auth.token) == "s3cret"


def test_malformed_reference_is_reported_once(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{agent: {model: '${MODEL'}}"))
    assert issue.key == "agent.model"
    assert "malformed variable reference" in issue.message


# --- every mistake: one clear issue -------------------------------------------------------


def test_wrong_type_names_line_key_expectation_and_value(write: WriteFile) -> None:
    path = write("herald.json5", "{\n  gateway: {\n    port: 'eighty',\n  },\n}\n")
    issue = one_issue(path)
    assert (issue.line, issue.column, issue.key) == (3, 5, "gateway.port")
    assert "valid integer" in issue.message
    assert "'eighty'" in issue.message
    assert str(issue).startswith(f"{path}:3:5: gateway.port: ")


def test_negative_max_concurrent(write: WriteFile) -> None:
    path = write("herald.toml", "[agent.subagents]\nmaxConcurrent = -1\n")
    issue = one_issue(path)
    assert (issue.line, issue.column, issue.key) == (2, 1, "agent.subagents.maxConcurrent")
    assert issue.message == "Input should be greater than or equal to 1 (got -1)"


def test_non_finite_numbers_name_file_line_and_key(write: WriteFile) -> None:
    # JSON5 reads Infinity and NaN, TOML inf and nan, and 1e999 overflows to infinity; a run
    # record holding one would make GET /v1/runs answer invalid JSON.
    json5 = write(
        "herald.json5",
        "{\n  agent: {\n    timeoutSeconds: -Infinity,\n    subagents: {\n"
        "      runTimeoutSeconds: Infinity,\n      archiveAfterMinutes: NaN,\n    },\n  },\n}\n",
    )
    assert [str(i) for i in issues_of(json5)] == [
        f"{json5}:3:5: agent.timeoutSeconds: Input should be a finite number (got -inf)",
        f"{json5}:5:7: agent.subagents.runTimeoutSeconds: Input should be a finite number "
        "(got inf)",
        f"{json5}:6:7: agent.subagents.archiveAfterMinutes: Input should be a finite number "
        "(got nan)",
    ]
    toml = write(
        "herald.toml",
        "[gateway]\nshutdownDrainSeconds = 1e999\n"
        "[agent.subagents]\nrunTimeoutSeconds = inf\n"
        "[models.providers.demo]\napi = 'scripted'\n"
        "models = [{ id = 'scripted', cost = { input = nan } }]\n",
    )
    assert [(i.line, i.key, i.message) for i in issues_of(toml)] == [
        (2, "gateway.shutdownDrainSeconds", "Input should be a finite number (got inf)"),
        (4, "agent.subagents.runTimeoutSeconds", "Input should be a finite number (got inf)"),
        (
            7,
            "models.providers.demo.models[0].cost.input",
            "Input should be a finite number (got nan)",
        ),
    ]


def test_non_finite_numbers_from_the_environment_name_the_variable() -> None:
    issue = one_issue(None, {"HERALD_AGENT__SUBAGENTS__RUNTIMEOUTSECONDS": "1e999"})
    assert str(issue) == (
        "agent.subagents.runTimeoutSeconds: Input should be a finite number (got inf) "
        "(from environment variable HERALD_AGENT__SUBAGENTS__RUNTIMEOUTSECONDS)"
    )


def test_port_out_of_range(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{gateway: {port: 70000}}"))
    assert (issue.line, issue.column, issue.key) == (1, 12, "gateway.port")
    assert issue.message == "Input should be less than or equal to 65535 (got 70000)"


def test_non_loopback_host_without_token(write: WriteFile) -> None:
    issue = one_issue(write("herald.toml", '[gateway]\nhost = "0.0.0.0"\n'))
    assert (issue.line, issue.key) == (1, "gateway.auth.token")
    assert issue.message == "required when gateway.host (0.0.0.0) is not a loopback address"


@pytest.mark.parametrize(
    ("text", "key", "line", "column", "hint"),
    [
        ("{gatway: {}}", "gatway", 1, 2, "did you mean 'gateway'?"),
        ("{gateway: {\n  prot: 1}}", "gateway.prot", 2, 3, "did you mean 'port'?"),
        (
            "{routing: {agents: {main: {\n  modle: 'demo/scripted'}}}}",
            "routing.agents.main.modle",
            2,
            3,
            "did you mean 'model'?",
        ),
        (
            "{models: {providers: {demo: {api: 'scripted', models: [{id: 'scripted',\n"
            "  cots: {input: 1}}]}}}}",
            "models.providers.demo.models[0].cots",
            2,
            3,
            "did you mean 'cost'?",
        ),
        ("{agent: {zzz: 1}}", "agent.zzz", 1, 10, "expected one of: model, systemPrompt"),
    ],
)
def test_unknown_keys_suggest_the_closest_at_every_depth(
    write: WriteFile, text: str, key: str, line: int, column: int, hint: str
) -> None:
    issue = one_issue(write("herald.json5", text))
    assert (issue.key, issue.line, issue.column) == (key, line, column)
    assert issue.message.startswith(f"unknown key {key.rsplit('.', 1)[-1]!r}; {hint}")


def test_same_key_in_both_spellings(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{gateway: {stateDir: 'a', state_dir: 'b'}}"))
    assert issue.message == "'state_dir' and 'stateDir' are the same key; keep one"


def test_several_mistakes_are_all_reported_in_file_order(write: WriteFile) -> None:
    path = write(
        "herald.json5",
        "{\n  agent: { maxIterations: 0 },\n  gateway: { port: -5, hots: 'x' },\n}\n",
    )
    issues = issues_of(path)
    assert [(i.line, i.key) for i in issues] == [
        (2, "agent.maxIterations"),
        (3, "gateway.port"),
        (3, "gateway.hots"),
    ]


def test_unknown_model_reference_points_at_the_key(write: WriteFile) -> None:
    path = write("herald.json5", "{\n  agent: {\n    model: 'nope/x',\n  },\n}\n")
    issue = one_issue(path)
    assert (issue.line, issue.column, issue.key) == (3, 5, "agent.model")
    assert issue.message == "unknown provider 'nope' (configured: demo)"


def test_default_agent_must_exist(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{routing: {defaultAgent: 'ghost'}}"))
    assert (issue.key, issue.column) == ("routing.defaultAgent", 12)
    assert "'ghost' is not one of routing.agents (main)" in issue.message


def test_bad_agent_id_points_at_the_id(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{routing: {agents: {main: {}, 'Bad Id': {}}}}"))
    assert (issue.key, issue.column) == ("routing.agents.Bad Id", 31)


def test_enabled_channel_must_target_a_configured_agent(write: WriteFile) -> None:
    path = write("herald.json5", "{channels: {webchat: {agent: 'ghost'}}}")
    assert one_issue(path).key == "channels.webchat.agent"
    # A disabled channel keeps its default agent even when no agent is called "main".
    text = "{routing: {defaultAgent: 'a', agents: {a: {}}}, channels: {webchat: {agent: 'a'}}}"
    assert (
        load_settings(write("other.json5", text), environ={}).settings.routing.default_agent == "a"
    )


def test_missing_required_key(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{models: {providers: {x: {models: []}}}}"))
    assert (issue.key, issue.message) == ("models.providers.x.api", "required key is missing")


def test_section_of_the_wrong_shape(write: WriteFile) -> None:
    issue = one_issue(write("herald.json5", "{gateway: 5}"))
    assert issue.message == "Input should be an object { ... } (got 5)"


def test_environment_mistakes_name_the_variable(write: WriteFile) -> None:
    issues = issues_of(
        None,
        {
            "HERALD_GATEWAY__PORT": "70000",
            "HERALD_GATWAY__HOST": "x",
            "HERALD_GATEWAY__HOST__NAME": "x",
        },
    )
    assert [str(i) for i in issues] == [
        "gateway.host: has no keys below it; set gateway.host as a whole "
        "(in HERALD_GATEWAY__HOST__NAME)",
        "gatway: unknown key (set by HERALD_GATWAY__HOST); did you mean 'gateway'?",
        "gateway.port: Input should be less than or equal to 65535 (got 70000) "
        "(from environment variable HERALD_GATEWAY__PORT)",
    ]


def test_flag_mistakes_name_the_command_line() -> None:
    issue = one_issue(None, overrides={"gateway": {"port": 0}})
    assert str(issue) == (
        "gateway.port: Input should be greater than or equal to 1 (got 0) (from the command line)"
    )


def test_secret_values_never_appear_in_messages(write: WriteFile) -> None:
    text = (
        "{gateway: {auth: 'sk-plain-1'}, channels: {discord: {token: ['sk-list-2']}},"
        " models: {providers: {demo: {api: 'scripted', apiKey: 12345678}}}}"
    )
    issues = issues_of(write("herald.json5", text))
    assert [i.key for i in issues] == [
        "gateway.auth",
        "channels.discord.token",
        "models.providers.demo.apiKey",
    ]
    text_of_all = "\n".join(str(i) for i in issues)
    for value in ("sk-plain-1", "sk-list-2", "12345678"):
        assert value not in text_of_all


def test_no_issue_is_reported_without_a_message(write: WriteFile) -> None:
    for issue in issues_of(write("herald.json5", "{gateway: {port: 'x'}, agent: {tools: 5}}")):
        assert issue.message
        assert issue.key


def test_overrides_with_non_text_keys_are_config_errors() -> None:
    issue = one_issue(None, overrides={"gateway": {1: "x"}})
    assert "not text" in issue.message


def test_unknown_provider_api_lists_the_choices(write: WriteFile) -> None:
    path = write("herald.json5", json.dumps({"models": {"providers": {"a": {"api": "nope"}}}}))
    issue = one_issue(path)
    assert issue.key == "models.providers.a.api"
    assert "'openai-completions', 'anthropic-messages' or 'scripted'" in issue.message


def test_without_config_the_lookup_order_is_env_then_cwd_then_user_then_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.config import config_candidates, find_config

    cwd, home, named = tmp_path / "cwd", tmp_path / "home", tmp_path / "named.toml"
    cwd.mkdir()
    (home / ".config" / "herald").mkdir(parents=True)
    monkeypatch.chdir(cwd)
    env = {"HOME": str(home)}
    user = home / ".config" / "herald" / "herald.toml"
    candidates = config_candidates(env)
    assert candidates[:3] == [cwd / "herald.json5", cwd / "herald.toml", cwd / "herald.json"]
    assert user in candidates
    assert candidates[-3:] == [
        Path("/etc/herald") / n for n in ("herald.json5", "herald.toml", "herald.json")
    ]
    assert candidates.index(user) < len(candidates) - 3
    found = find_config(env)  # nothing in cwd or the user folder: /etc/herald, if anything
    assert found is None or found.startswith("/etc/herald/")
    user.write_text('[agent]\nmodel = "demo/scripted"\n')
    assert find_config(env) == str(user)
    (cwd / "herald.json5").write_text("{}")
    assert find_config(env) == str(cwd / "herald.json5")
    named.write_text("")
    assert find_config({**env, "HERALD_CONFIG": str(named)}) == str(named)
    assert find_config({"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) == str(cwd / "herald.json5")
    # load_settings without a path takes the file the lookup finds.
    (cwd / "herald.json5").write_text("{ agent: { maxConcurrent: 7 } }")
    loaded = load_settings(None, environ=env)
    assert loaded.path == cwd / "herald.json5"
    assert loaded.settings.agent.max_concurrent == 7


# --- context windows and compaction ---------------------------------------------------------


def test_compaction_and_context_window_settings_load(write: WriteFile) -> None:
    path = write(
        "herald.toml",
        '[agent.compaction]\nmode = "truncate"\nreserveTokens = 1000\nkeepRecentTurns = 2\n'
        "[agent.tools]\nmaxResultChars = 5000\n"
        '[models.providers.demo]\napi = "scripted"\n'
        '[[models.providers.demo.models]]\nid = "scripted"\ncontextWindow = 8000\n',
    )
    settings = load_settings(path, environ={}).settings
    compaction = settings.agent.compaction
    assert (compaction.mode, compaction.reserve_tokens, compaction.keep_recent_turns) == (
        "truncate",
        1000,
        2,
    )
    assert settings.agent.tools.max_result_chars == 5000
    assert settings.models.providers["demo"].models[0].context_window == 8000
    defaults = HeraldSettings().agent
    assert (defaults.compaction.mode, defaults.compaction.reserve_tokens) == ("summary", None)
    assert (defaults.compaction.keep_recent_turns, defaults.tools.max_result_chars) == (4, 20_000)


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("{agent: {compaction: {mode: 'squash'}}}", "agent.compaction.mode", "'summary'"),
        ("{agent: {compaction: {reserveTokens: -1}}}", "agent.compaction.reserveTokens", ">= 0"),
        ("{agent: {compaction: {keepRecentTurns: 0}}}", "agent.compaction.keepRecentTurns", "1"),
        ("{agent: {tools: {maxResultChars: 10}}}", "agent.tools.maxResultChars", "500"),
        (
            "{models: {providers: {demo: {api: 'scripted', models: [{id: 'scripted', "
            "contextWindow: 100}]}}}}",
            "models.providers.demo.models[0].contextWindow",
            "256",
        ),
    ],
)
def test_bad_compaction_values_name_their_key(
    write: WriteFile, text: str, key: str, message: str
) -> None:
    issue = one_issue(write("herald.json5", text))
    assert issue.key == key
    assert message.strip(">= ") in issue.message


def test_a_4096_token_model_loads_on_defaults(write: WriteFile) -> None:
    # reserveTokens null is a quarter of a small window: no window is too small for it.
    for window in (4096, 4000, 256):
        model = {"id": "scripted", "contextWindow": window}
        text = json.dumps(
            {"models": {"providers": {"demo": {"api": "scripted", "models": [model]}}}}
        )
        settings = load_settings(write("herald.json", text), environ={}).settings
        assert settings.models.providers["demo"].models[0].context_window == window


def test_a_context_window_must_leave_room_beyond_the_reserve(write: WriteFile) -> None:
    path = write(
        "herald.json5",
        "{\n  agent: {compaction: {reserveTokens: 8000}},\n"
        "  models: {providers: {demo: {api: 'scripted', models: [\n"
        "    {id: 'scripted', contextWindow: 8000},\n  ]}}},\n}\n",
    )
    issue = one_issue(path)
    assert (issue.line, issue.key) == (2, "agent.compaction.reserveTokens")
    assert issue.message == (
        "8000 leaves no room for a prompt: contextWindow of demo/scripted has 8000"
    )

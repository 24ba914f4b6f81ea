"""What `herald run` checks before it creates anything, and `herald config check` with it:
each problem exits 78 naming the file and the key, and leaves no state behind."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway.constants import EXIT_CONFIG, EXIT_UNAVAILABLE
from tests.gateway.daemon_process import HERALD, clean_env, free_port, write_config


def config(tmp_path: Path, state: Path, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "gateway": {"port": free_port(), "stateDir": str(state)},
        "channels": {"webchat": {"enabled": False}},
        **extra,
    }
    return write_config(tmp_path / "herald.json", data)


def herald(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HERALD, *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )


def refused_by_both(path: Path, *expected: str) -> None:
    """``config check`` and ``run`` both exit 78 and say each of ``expected``."""
    for command in (("config", "check", "--config", str(path)), ("run", "--config", str(path))):
        done = herald(*command)
        output = done.stdout + done.stderr
        assert done.returncode == EXIT_CONFIG, (command, output)
        for text in expected:
            assert text in output, (command, text, output)
        assert "Traceback" not in output


def test_a_typo_in_a_deny_list_is_a_config_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agents = {"main": {"tools": {"deny": ["web-fetch"]}, "subagents": {"allowAgents": ["hlper"]}}}
    path = config(tmp_path, state, routing={"agents": agents, "defaultAgent": "main"})
    refused_by_both(
        path,
        f"{path}:1:",  # at the key's line (the test's file is one line of JSON)
        "routing.agents.main.tools: unknown tool 'web-fetch'; did you mean 'web_fetch'?",
        "routing.agents.main.subagents.allowAgents: unknown agent 'hlper'",
    )
    assert not state.exists()


@pytest.mark.parametrize("where", ["a file", "under a file", "under /proc"])
def test_a_state_dir_that_cannot_be_one_exits_78_before_anything_is_made(
    tmp_path: Path, where: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    state = {
        "a file": blocker,
        "under a file": blocker / "state",
        "under /proc": Path("/proc/self/herald-state"),
    }[where]
    refused_by_both(config(tmp_path, state), "gateway.stateDir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "herald.json"]


def test_a_missing_demo_script_exits_78_before_the_database_is_made(tmp_path: Path) -> None:
    state = tmp_path / "state"
    providers = {"demo": {"api": "scripted", "script": "missing.json5", "models": [{"id": "s"}]}}
    path = config(tmp_path, state, models={"providers": providers}, agent={"model": "demo/s"})
    refused_by_both(path, "models.providers.demo.script", "missing.json5")
    assert not state.exists()


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("herald.json5", "{agent: {subagents: {runTimeoutSeconds: Infinity}}, %s}", ":1:22: "),
        ("herald.toml", "[agent.subagents]\nrunTimeoutSeconds = nan\n%s", ":2:1: "),
    ],
)
def test_a_non_finite_number_exits_78_before_anything_is_made(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    state = tmp_path / "state"
    if name.endswith(".toml"):
        rest = f"[gateway]\nstateDir = '{state}'\n[channels.webchat]\nenabled = false\n"
    else:
        rest = f"gateway: {{stateDir: '{state}'}}, channels: {{webchat: {{enabled: false}}}}"
    path = tmp_path / name
    path.write_text(text % rest, encoding="utf-8")
    refused_by_both(
        path, f"{path}{where}agent.subagents.runTimeoutSeconds: Input should be a finite number"
    )
    assert not state.exists()


def test_a_clean_config_passes_the_check(tmp_path: Path) -> None:
    done = herald("config", "check", "--config", str(config(tmp_path, tmp_path / "state")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "state").exists()


def test_bad_compaction_settings_exit_78_naming_the_key(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = config(
        tmp_path,
        state,
        agent={"compaction": {"mode": "squash"}, "tools": {"maxResultChars": 0}},
    )
    refused_by_both(
        path,
        "agent.compaction.mode: Input should be 'summary', 'truncate' or 'off'",
        "agent.tools.maxResultChars: Input should be greater than or equal to 500 (got 0)",
    )
    assert not state.exists()


EXEC_ALLOWED = {"tools": {"allow": ["*", "exec"]}}


def test_exec_without_bubblewrap_exits_78_naming_the_package(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = config(tmp_path, state, agent=EXEC_ALLOWED)
    no_bwrap = tmp_path / "bin"  # a PATH on which there is no bwrap
    no_bwrap.mkdir()
    for command in (("config", "check", "--config", str(path)), ("run", "--config", str(path))):
        done = subprocess.run(
            [*HERALD, *command],
            env=clean_env(PATH=str(no_bwrap)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == EXIT_CONFIG, output
        assert "agent.tools.exec.sandbox.mode" in output
        assert "apt-get install bubblewrap" in output
    assert not state.exists()
    # The control: with bwrap on PATH, the same config passes; "off" needs no bwrap.
    assert herald("config", "check", "--config", str(path)).returncode == 0
    off = {"tools": {"allow": ["*", "exec"], "exec": {"sandbox": {"mode": "off"}}}}
    path = config(tmp_path, state, agent=off)
    done = subprocess.run(
        [*HERALD, "config", "check", "--config", str(path)],
        env=clean_env(PATH=str(no_bwrap)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_read_only_paths_must_exist_and_hide_herald(tmp_path: Path) -> None:
    state = tmp_path / "state"
    sandbox = {"readOnly": [str(tmp_path / "missing"), str(tmp_path)]}
    path = config(tmp_path, state, agent={"tools": {"exec": {"sandbox": sandbox}}})
    refused_by_both(
        path,
        "agent.tools.exec.sandbox.readOnly",
        f"{tmp_path / 'missing'} does not exist",
        f"{tmp_path} holds the state directory",
        f"{tmp_path} holds the config file",
    )
    assert not state.exists()


def test_a_relative_read_only_path_is_a_schema_error(tmp_path: Path) -> None:
    path = config(
        tmp_path, tmp_path / "state", agent={"tools": {"exec": {"sandbox": {"readOnly": ["data"]}}}}
    )
    refused_by_both(path, "agent.tools.exec.sandbox.readOnly", "'data' is not an absolute path")


def test_an_empty_api_key_for_the_vendors_api_is_a_config_error_as_doctor_says(
    tmp_path: Path,
) -> None:
    # (An unset ${VARIABLE} was one already; an empty value was OK to check, FAIL to doctor.)
    state = tmp_path / "state"
    openai = {"api": "openai-completions", "apiKey": "", "models": [{"id": "gpt-4o-mini"}]}
    path = config(
        tmp_path,
        state,
        agent={"model": "openai/gpt-4o-mini"},
        models={"providers": {"openai": openai}},
    )
    refused_by_both(path, "models.providers.openai.apiKey: empty", "OPENAI_API_KEY")
    assert not state.exists()
    doctor = herald("doctor", "--config", str(path))
    assert doctor.returncode == 1
    assert "FAIL  provider openai: no API key" in doctor.stdout


def test_a_local_server_needs_no_key_and_an_unused_provider_is_no_error(tmp_path: Path) -> None:
    local = {
        "api": "openai-completions",
        "baseUrl": "http://127.0.0.1:9/v1",
        "models": [{"id": "llama"}],
    }
    unused = {"api": "anthropic-messages", "models": [{"id": "claude-haiku-4-5"}]}
    path = config(
        tmp_path,
        tmp_path / "state",
        agent={"model": "local/llama"},
        models={"providers": {"local": local, "anthropic": unused}},
    )
    done = herald("config", "check", "--config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_postgresql_unreachable_at_start_is_one_line_and_exit_69(tmp_path: Path) -> None:
    # A fault, not a mistake: EX_UNAVAILABLE (systemd restarts), not 78, and no traceback.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed again: nothing listens there
    url = f"postgresql://herald:pw-secret-42@127.0.0.1:{port}/heraldstate"
    path = config(tmp_path, tmp_path / "state", cluster={"databaseUrl": url})
    done = herald("run", "--config", str(path))
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_UNAVAILABLE, output
    assert "Traceback" not in output
    assert "pw-secret-42" not in output
    [line] = [line for line in output.splitlines() if '"level":"error"' in line]
    assert f"postgresql://herald:********@127.0.0.1:{port}/heraldstate" in line

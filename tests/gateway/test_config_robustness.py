"""No input makes the loader fail with anything but ConfigError (and never a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import load_settings
from gateway.errors import ConfigError, ConfigIssue

KEYS = st.sampled_from(
    [
        "gateway", "agent", "routing", "models", "channels", "port", "host", "auth", "token",
        "stateDir", "state_dir", "model", "subagents", "maxConcurrent", "tools", "allow", "deny",
        "agents", "main", "defaultAgent", "providers", "demo", "api", "models", "id", "cost",
        "slack", "discord", "webchat", "enabled", "botToken", "mode", "Bad Key", "",
    ]
)  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from(["scripted", "demo/scripted", "0.0.0.0", "${MISSING}", "${X:-1}", "${"])
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
DOCUMENTS = st.dictionaries(KEYS, VALUES, max_size=5)
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _issues(path: Path | None, env: dict[str, str]) -> list[ConfigIssue] | None:
    """The issues of a failed load, or None when it loaded."""
    try:
        load_settings(path, environ=env)
    except ConfigError as exc:
        return exc.issues
    return None


def _load(path: Path) -> None:
    issues = _issues(path, {"X": "2"})
    if issues is not None:
        assert issues
        assert all(str(issue) and issue.message for issue in issues)


@FUZZ
@given(document=DOCUMENTS)
def test_any_structure_loads_or_is_a_config_error(
    tmp_path: Path, document: dict[str, object]
) -> None:
    path = tmp_path / "fuzz.json5"
    path.write_text(json.dumps(document), encoding="utf-8")
    _load(path)


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list("{}[]:,\"'/*\n ab1.-=#$")), max_size=40))
def test_any_text_loads_or_is_a_config_error(tmp_path: Path, text: str) -> None:
    for name in ("fuzz.json5", "fuzz.toml"):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        _load(path)


@FUZZ
@given(
    env=st.dictionaries(
        st.builds(lambda a, b: f"HERALD_{a}__{b}", KEYS, KEYS), st.text(max_size=10), max_size=4
    )
)
def test_any_environment_loads_or_is_a_config_error(env: dict[str, str]) -> None:
    issues = _issues(None, env)
    assert issues is None or len(issues) > 0

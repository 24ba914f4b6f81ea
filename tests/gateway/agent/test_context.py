"""The tool context of a call made from a session: who calls, from where, with what."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.agent import ToolContexts
from gateway.config import load_settings
from gateway.reload import SettingsHolder
from gateway.state import SessionRecord
from gateway.tools import ServiceKey, UnknownAgentError

GREETER: ServiceKey[str] = ServiceKey("greeter")


def session(key: str, agent_id: str = "main", kind: Any = "main") -> SessionRecord:
    return SessionRecord(
        key=key, session_id="sid-1", agent_id=agent_id, kind=kind, created_at=0, updated_at=0
    )


def holder_for(tmp_path: Path, agents: dict[str, Any]) -> SettingsHolder:
    path = tmp_path / "herald.json"
    data = {"gateway": {"stateDir": str(tmp_path / "state")}, "routing": {"agents": agents}}
    path.write_text(json.dumps(data))
    return SettingsHolder(load_settings(path, environ={}).settings, path=str(path), environ={})


def test_a_context_says_who_calls_from_where(tmp_path: Path) -> None:
    holder = holder_for(tmp_path, {"main": {}, "helper": {"workspace": str(tmp_path / "hw")}})
    contexts = ToolContexts(holder, {})
    main = contexts.for_session(session("agent:main:memory:channel:c1"))
    assert (main.agent_id, main.session_key, main.session_id) == (
        "main",
        "agent:main:memory:channel:c1",
        "sid-1",
    )
    assert (main.is_subagent, main.run_id) == (False, None)
    assert main.workspace == tmp_path / "state" / "workspaces" / "main"
    child = contexts.for_session(
        session("agent:helper:subagent:1234", "helper", "subagent"), run_id="r1"
    )
    assert (child.agent_id, child.is_subagent, child.run_id) == ("helper", True, "r1")
    assert child.workspace == (tmp_path / "hw").resolve()
    assert child.settings is holder.current


def test_contexts_follow_a_reload(tmp_path: Path) -> None:
    holder = holder_for(tmp_path, {"main": {}})
    contexts = ToolContexts(holder, {})
    path = Path(holder.path or "")
    data = json.loads(path.read_text())
    data["routing"]["agents"]["main"] = {"workspace": str(tmp_path / "moved")}
    path.write_text(json.dumps(data))
    assert holder.reload()
    ctx = contexts.for_session(session("agent:main:main"))
    assert ctx.workspace == (tmp_path / "moved").resolve()
    assert ctx.settings is holder.current


def test_services_added_after_the_contexts_were_made_are_seen(tmp_path: Path) -> None:
    # The gateway builds its contexts before the services session tools reach (a spawner,
    # the turn queue), and fills them in as it builds them.
    services: dict[ServiceKey[Any], object] = {}
    contexts = ToolContexts(holder_for(tmp_path, {"main": {}}), services)
    services[GREETER] = "hello"
    assert contexts.for_session(session("agent:main:main")).service(GREETER) == "hello"


def test_a_session_of_an_agent_no_longer_configured_has_no_context(tmp_path: Path) -> None:
    contexts = ToolContexts(holder_for(tmp_path, {"main": {}}), {})
    with pytest.raises(UnknownAgentError):
        contexts.for_session(session("agent:gone:main", "gone"))

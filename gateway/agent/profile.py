"""An agent's effective settings: the ``agent`` defaults overlaid with ``routing.agents.<id>``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.constants import WORKSPACES_DIR
from gateway.settings import HeraldSettings
from gateway.state import RunRecord
from gateway.tools import UnknownAgentError


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """What a run of one agent uses; resolved from the settings in force when it starts."""

    agent_id: str
    name: str
    model_ref: str
    system_prompt: str
    workspace: Path
    max_iterations: int
    timeout_seconds: float


def resolve_agent(settings: HeraldSettings, agent_id: str) -> AgentProfile:
    """The profile of ``agent_id``; raises :class:`UnknownAgentError`."""
    agent = settings.routing.agents.get(agent_id)
    if agent is None:
        raise UnknownAgentError(agent_id)
    defaults = settings.agent
    state_dir = settings.gateway.resolved_state_dir()
    workspace = (
        Path(agent.workspace).expanduser().resolve()
        if agent.workspace
        else state_dir / WORKSPACES_DIR / agent_id
    )
    return AgentProfile(
        agent_id=agent_id,
        name=agent.name or agent_id,
        model_ref=agent.model or defaults.model,
        system_prompt=agent.system_prompt or defaults.system_prompt,
        workspace=workspace,
        max_iterations=defaults.max_iterations,
        timeout_seconds=defaults.timeout_seconds,
    )


def subagent_model_ref(settings: HeraldSettings, target: AgentProfile) -> str:
    """The model a sub-agent of ``target`` runs on when the spawn names none.

    ``agent.subagents.model`` when set, else the target agent's own model.
    """
    return settings.agent.subagents.model or target.model_ref


def agents_above(ancestors: Sequence[RunRecord]) -> tuple[str, ...]:
    """The agents of the sessions above a run's requester, the person's session's first:
    the ``lineage`` of :func:`gateway.tools.tools_for_subagent`. ``ancestors`` are the runs
    above the run (``RunsTable.lineage``), the depth-1 run first."""
    if not ancestors:
        return ()
    return (
        ancestors[0].request.requester_agent_id,
        *(run.request.agent_id for run in ancestors[:-1]),
    )

"""One agent turn and what it runs with: the model/tool loop, its transcript sink, the
agent's effective profile and the tool context of a session. Chat turns and sub-agent runs
both use it."""

from gateway.agent.context import ToolContexts
from gateway.agent.conversation import DISK_FULL_REPLY, Conversations, TurnResult
from gateway.agent.factory import TurnFactory
from gateway.agent.history import HistoryCache, trim_history
from gateway.agent.invoke import (
    AgentNotFoundError,
    InvokeError,
    SessionNotFoundError,
    ToolInvoker,
    ToolNotAllowedError,
)
from gateway.agent.profile import AgentProfile, agents_above, resolve_agent, subagent_model_ref
from gateway.agent.sink import StoreSink
from gateway.agent.turn import (
    EndedBy,
    Inbox,
    Injected,
    TranscriptSink,
    TurnOutcome,
    TurnSetup,
    run_turn,
)

__all__ = [
    "DISK_FULL_REPLY",
    "AgentNotFoundError",
    "AgentProfile",
    "Conversations",
    "EndedBy",
    "HistoryCache",
    "Inbox",
    "Injected",
    "InvokeError",
    "SessionNotFoundError",
    "StoreSink",
    "ToolContexts",
    "ToolInvoker",
    "ToolNotAllowedError",
    "TranscriptSink",
    "TurnFactory",
    "TurnOutcome",
    "TurnResult",
    "TurnSetup",
    "agents_above",
    "resolve_agent",
    "run_turn",
    "subagent_model_ref",
    "trim_history",
]

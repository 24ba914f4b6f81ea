"""One agent turn and what it runs with: the model/tool loop, its transcript sink, the
agent's effective profile, the tool context of a session, and the conversation kept within
the model's context window (compaction). Chat turns and sub-agent runs both use it."""

from gateway.agent.compaction import Compaction, bound_tool_results
from gateway.agent.context import ToolContexts
from gateway.agent.context_window import ContextPolicy, PromptMeter
from gateway.agent.conversation import DISK_FULL_REPLY, Conversations, TurnResult
from gateway.agent.factory import TurnFactory
from gateway.agent.history import HistoryCache
from gateway.agent.invoke import (
    AgentNotFoundError,
    InvokeError,
    SessionNotFoundError,
    ToolInvoker,
    ToolNotAllowedError,
)
from gateway.agent.profile import AgentProfile, agents_above, resolve_agent, subagent_model_ref
from gateway.agent.setup import TranscriptSink, TurnSetup
from gateway.agent.sink import StoreSink
from gateway.agent.turn import EndedBy, Inbox, Injected, TurnOutcome, run_turn
from gateway.agent.turngate import TurnGate

__all__ = [
    "DISK_FULL_REPLY",
    "AgentNotFoundError",
    "AgentProfile",
    "Compaction",
    "ContextPolicy",
    "Conversations",
    "EndedBy",
    "HistoryCache",
    "Inbox",
    "Injected",
    "InvokeError",
    "PromptMeter",
    "SessionNotFoundError",
    "StoreSink",
    "ToolContexts",
    "ToolInvoker",
    "ToolNotAllowedError",
    "TranscriptSink",
    "TurnFactory",
    "TurnGate",
    "TurnOutcome",
    "TurnResult",
    "TurnSetup",
    "agents_above",
    "bound_tool_results",
    "resolve_agent",
    "run_turn",
    "subagent_model_ref",
]

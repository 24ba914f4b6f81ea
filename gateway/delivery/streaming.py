"""A chat turn's reply: what the chat shows while the turn is written, and its final text.

One :class:`TurnReply` per chat turn wraps the reply its channel opened
(:meth:`channels.Channel.open_reply`). The turn holds it from start to end: its model calls
hear it (:attr:`TurnReply.listener`, carried in the turn's setup) and the final text goes to
it (:meth:`TurnReply.finish`). When a call ends in tool calls, its text gives way to one line
naming the tools (``Using web_fetch…``) and the next call's text continues the same message
below it; the final reply replaces it all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from channels import ChannelSendError, Reply
from gateway.delivery.replies import REPLY_ATTEMPTS, REPLY_BASE_DELAY, not_delivered, retried

logger = logging.getLogger(__name__)

#: Between a status line and the text of the model call after it.
STATUS_GAP = "\n\n"


def status_line(tools: Sequence[str]) -> str:
    """``Using web_fetch…``; several tools are named once each, in order."""
    names = list(dict.fromkeys(name for name in tools if name)) or ["tools"]
    return f"Using {', '.join(names)}…"


class TurnReply:
    """A chat turn's reply (see the module docstring). Showing text never raises into the
    turn: it is a courtesy, the final reply is the answer."""

    def __init__(
        self,
        reply: Reply,
        *,
        attempts: int = REPLY_ATTEMPTS,
        base_delay: float = REPLY_BASE_DELAY,
    ) -> None:
        self._reply = reply
        self._attempts = attempts
        self._base_delay = base_delay
        self._gap = False
        self.pieces = 0

    def __repr__(self) -> str:
        return f"<TurnReply {self._reply!r} pieces={self.pieces}>"

    @property
    def listener(self) -> TurnReply | None:
        """What the turn's model calls feed as they write: this reply when its chat shows
        text as it is written, else None (the calls need not stream)."""
        return self if self._reply.streams else None

    def text(self, piece: str) -> None:
        """More of the current model call's text."""
        if not piece:
            return
        self.pieces += 1
        if self._gap:
            self._gap = False
            piece = STATUS_GAP + piece.lstrip()
        try:
            self._reply.append(piece)
        except Exception:
            logger.exception("streamed text not shown")

    def tools(self, names: Sequence[str]) -> None:
        """The model call ended in calls of ``names``: a status line replaces its text."""
        self._gap = True
        try:
            self._reply.replace(status_line(names))
        except Exception:
            logger.exception("tool status not shown")

    def keep(self) -> None:
        """The reply is in the chat already: closing takes nothing back."""
        self._reply.keep()

    async def finish(self, text: str) -> bool:
        """Deliver the final reply ``text``, trying again after transient failures; False
        (logged) when it could not be delivered."""
        try:
            await retried(
                lambda: self._reply.finish(text),
                attempts=self._attempts,
                base_delay=self._base_delay,
            )
        except ChannelSendError as exc:
            not_delivered(self._reply.final, exc)
            return False
        return True

    async def close(self) -> None:
        try:
            await self._reply.close()
        except Exception:
            logger.exception("reply not closed")

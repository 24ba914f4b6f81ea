"""What a chat shows while a turn is written: the model's text as it grows, and a status line
while tools run.

One :class:`StreamedReply` per chat turn sits between the turn (which hears each model
call's text and each round of tool calls) and the channel's :class:`channels.ReplyStream`.
When a call ends in tool calls, its text gives way to one line naming the tools
(``Using web_fetch…``) and the next call's text continues the same message below it; the
final reply, sent whole afterwards, replaces it all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from channels import ReplyStream

logger = logging.getLogger(__name__)

#: Between a status line and the text of the model call after it.
STATUS_GAP = "\n\n"


def status_line(tools: Sequence[str]) -> str:
    """``Using web_fetch…``; several tools are named once each, in order."""
    names = list(dict.fromkeys(name for name in tools if name)) or ["tools"]
    return f"Using {', '.join(names)}…"


class StreamedReply:
    """A turn's reply as the chat shows it while being written (see the module docstring).
    Never raises into the turn: showing text is a courtesy, the final reply is the answer."""

    def __init__(self, stream: ReplyStream) -> None:
        self._stream = stream
        self._gap = False
        self.pieces = 0

    def __repr__(self) -> str:
        return f"<StreamedReply pieces={self.pieces}>"

    def text(self, piece: str) -> None:
        """More of the current model call's text."""
        if not piece:
            return
        self.pieces += 1
        if self._gap:
            self._gap = False
            piece = STATUS_GAP + piece.lstrip()
        try:
            self._stream.append(piece)
        except Exception:
            logger.exception("streamed text not shown")

    def tools(self, names: Sequence[str]) -> None:
        """The model call ended in calls of ``names``: a status line replaces its text."""
        self._gap = True
        try:
            self._stream.replace(status_line(names))
        except Exception:
            logger.exception("tool status not shown")

    def keep(self) -> None:
        """The reply is in the chat already: closing takes nothing back."""
        self._stream.keep()

    async def close(self) -> None:
        try:
            await self._stream.close()
        except Exception:
            logger.exception("streamed reply not closed")

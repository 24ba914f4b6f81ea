"""A reply the chat shows while it is being written: the channel side of streaming.

The gateway opens one :class:`ReplyStream` per chat turn (:meth:`Channel.open_stream`), feeds
it the reply's text as the model writes it, then sends the final message as usual (its
``reply_to`` is the stream's, so the channel knows which streamed message it completes) and
closes the stream. ``append`` and ``replace`` never block and never raise: the model's
stream must not wait for a chat, so a channel buffers and shows the text in its own time,
within its chat's rate limits; a failure to show a piece is the channel's to log.

Once: the streamed message is the reply. A stream that posts a message in the chat says so
(its :class:`StreamedMessage`) through the ``record`` callback it was opened with, when it
first posts and whenever it posts another part; the gateway keeps that with the recorded
inbound message. A turn run again after a crash opens its stream with that record as
``earlier``: the stream edits those messages instead of posting new ones, and posts anew only
where a message is gone (deleted meanwhile).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamedMessage:
    """The chat messages a streamed reply is shown in: what a re-run of its turn edits."""

    chat_id: str
    thread_id: str | None
    #: The provider's ids of the messages, in order (Discord parts, a Slack ``ts``).
    message_ids: tuple[str, ...]


#: Keeps a stream's :class:`StreamedMessage` (see the module docstring); may raise, and the
#: stream only logs it: the reply is shown either way.
StreamRecorder = Callable[[StreamedMessage], Awaitable[None]]


class ReplyStream(abc.ABC):
    """One streamed reply message; see the module docstring."""

    @abc.abstractmethod
    def append(self, text: str) -> None:
        """Add ``text`` to the end of the message shown."""

    @abc.abstractmethod
    def replace(self, text: str) -> None:
        """Show ``text`` in place of everything shown so far (a tool-call status line)."""

    def keep(self) -> None:
        """The reply is in the chat already (a run of this turn before a crash sent it, in
        the messages this stream took over): :meth:`close` leaves what is shown. Default:
        nothing is taken back anyway."""
        return None

    async def close(self) -> None:
        """The turn is over and its final message was sent (or there is none): stop showing
        the growing text. Idempotent. Default: nothing to release."""
        return None

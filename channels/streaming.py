"""A reply the chat shows while it is written: what a streamed reply records of itself.

The gateway opens one :class:`channels.base.Reply` per chat turn
(:meth:`Channel.open_reply <channels.base.Channel.open_reply>`), feeds it the reply's text as
the model writes it, then finishes it with the final text and closes it. A channel that
streams answers with a reply of its own (:meth:`Channel.stream_reply`) that shows the text
in its own time, within its chat's rate limits; a failure to show a piece is the channel's
to log.

Once: the streamed message is the reply. A reply that posts a message in the chat says so
(its :class:`StreamedMessage`) through the ``record`` callback it was opened with, when it
first posts and whenever it posts another part; the gateway keeps that with the recorded
inbound message. A turn run again after a crash opens its reply with that record as
``earlier``: the reply edits those messages instead of posting new ones, and posts anew only
where a message is gone (deleted meanwhile).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamedMessage:
    """The chat messages a streamed reply is shown in: what a re-run of its turn edits."""

    chat_id: str
    thread_id: str | None
    #: The provider's ids of the messages, in order (Discord parts, a Slack ``ts``).
    message_ids: tuple[str, ...]


#: Keeps a reply's :class:`StreamedMessage` (see the module docstring); may raise, and the
#: reply only logs it: the text is shown either way.
StreamRecorder = Callable[[StreamedMessage], Awaitable[None]]

"""A Discord reply shown as it is written: one posted message edited as the text grows.

The first piece of text is posted at once; after that the message is edited with the newest
text at most once every :data:`EDIT_INTERVAL` seconds (Discord's limit on edits is per
channel, about five in five seconds: one a second leaves room for the rest of the chat).
Text past 2,000 characters continues in a new message, cut where :func:`chunk_message` cuts
a long reply. The final reply (:meth:`DiscordStream.finish`, on the reply the turn holds)
edits these messages to its own text, posts the parts they lack and deletes streamed ones
it no longer needs: one reply per turn.

Once: each part's id is recorded (``record``) when it is posted. A turn run again after a
crash opens its stream with those ids (``earlier``) and edits those messages to its own
text; a part deleted meanwhile (404 Unknown Message) is posted anew.

Showing the text as it grows is a courtesy: a failed post or edit is logged, never raised,
and the final reply is delivered with the channel's usual errors and retries.
"""

from __future__ import annotations

import contextlib
import logging
import secrets

import aiohttp

from channels.base import OutboundMessage, SentMessage
from channels.discord._sdk import discord
from channels.discord.errors import send_error
from channels.discord.format import chunk_message
from channels.streaming import StreamedMessage, StreamRecorder
from channels.throttled import ThrottledStream

log = logging.getLogger(__name__)

#: Seconds between updates of a streamed message (see the module docstring).
EDIT_INTERVAL = 1.0

Target = discord.PartialMessageable
_SHOW_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError)


class DiscordStream(ThrottledStream):
    """One turn's reply in one Discord chat, posted then edited; see the module docstring."""

    _task_name = "discord-stream"

    def __init__(
        self,
        target: Target,
        final: OutboundMessage,
        *,
        allowed_mentions: discord.AllowedMentions,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
        interval: float = EDIT_INTERVAL,
    ) -> None:
        """``final`` is the reply this stream becomes (its text is not used): its delivery
        token gives each part's nonce, so a post repeated after a lost answer is one post.
        ``earlier``/``record``: see the module docstring."""
        super().__init__(final, record=record, interval=interval)
        self._target = target
        self._mentions = allowed_mentions
        #: (message id, content) of each posted part, in order; None: what a message posted
        #: before a crash shows is not known, so it is edited whatever the text.
        self.posted: list[tuple[str, str | None]] = []
        if earlier is not None and earlier.chat_id == final.chat_id:
            self.posted = [(message_id, None) for message_id in earlier.message_ids]

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<DiscordStream {self.final.reply_to} parts={len(self.posted)}{state}>"

    async def _show_round(self, text: str) -> None:
        try:
            await self._show(chunk_message(text))
        except _SHOW_ERRORS as exc:
            log.info("streamed Discord text not shown: %s", exc)

    async def _show(self, parts: list[str]) -> list[str]:
        """Make the posted messages read ``parts``: edit those that differ, post the rest.
        Returns the ids of the messages holding ``parts``."""
        for index, part in enumerate(parts):
            if index < len(self.posted):
                message_id, shown = self.posted[index]
                if shown == part:
                    continue
                try:
                    await self._target.get_partial_message(int(message_id)).edit(
                        content=part, allowed_mentions=self._mentions
                    )
                    self._counted()
                    self.posted[index] = (message_id, part)
                    continue
                except discord.NotFound:  # deleted meanwhile: this part gets a new message
                    self._counted()
            await self._post(index, part)
        return [message_id for message_id, _ in self.posted[: len(parts)]]

    async def _post(self, index: int, part: str) -> None:
        """Post part ``index`` (or post again one deleted meanwhile) and record it."""
        nonce = self.final.delivery_token(index) or secrets.randbits(64)
        if index < len(self.posted):
            nonce = secrets.randbits(64)  # the part's nonce may hand back the deleted one
        posted = await self._target.send(part, allowed_mentions=self._mentions, nonce=nonce)
        self._counted()
        if posted.content != part.strip():
            # Discord handed back the message an earlier process posted with this nonce
            # (it died mid-stream before recording it): this reply takes it over.
            await posted.edit(content=part, allowed_mentions=self._mentions)
        if index < len(self.posted):
            self.posted[index] = (str(posted.id), part)
        else:
            self.posted.append((str(posted.id), part))
        await self._recorded()

    async def _recorded(self) -> None:
        """Keep the parts' ids (see the module docstring); a failure is only logged: the
        nonce still finds a first part posted again soon after a crash."""
        if self._record is None:
            return
        ids = tuple(message_id for message_id, _ in self.posted)
        try:
            await self._record(StreamedMessage(self.final.chat_id, self.final.thread_id, ids))
        except Exception as exc:
            log.warning("streamed Discord message not recorded: %s", exc)

    async def _finish(self, message: OutboundMessage) -> SentMessage:
        """Turn the streamed messages into the final reply ``message`` (see the module
        docstring); raises ``ChannelSendError`` as a send does."""
        await self._stop_writing()
        self._finished = True
        parts = chunk_message(message.text)
        await self._keep_interval()
        async with self._lock:
            try:
                ids = await self._show(parts)
                while len(self.posted) > len(parts):
                    message_id, _ = self.posted[-1]
                    with contextlib.suppress(discord.NotFound):
                        await self._target.get_partial_message(int(message_id)).delete()
                    self.posted.pop()
            except Exception as exc:
                error = send_error(exc)
                if error is None:
                    raise
                raise error from exc
        return SentMessage(chat_id=message.chat_id, message_ids=tuple(ids))

    async def _take_back(self) -> None:
        for message_id, _ in reversed(self.posted):
            try:
                await self._target.get_partial_message(int(message_id)).delete()
            except _SHOW_ERRORS as exc:
                log.info("streamed Discord message not taken back: %s", exc)
        self.posted.clear()

"""A Discord reply shown as it is written: one posted message edited as the text grows.

The first piece of text is posted at once; after that the message is edited with the newest
text at most once every :data:`EDIT_INTERVAL` seconds (Discord's limit on edits is per
channel, about five in five seconds: one a second leaves room for the rest of the chat).
Text past 2,000 characters continues in a new message, cut where :func:`chunk_message` cuts
a long reply. The final reply (the channel's :meth:`~DiscordChannel.send` of the message
whose ``reply_to`` is this stream's) edits these messages to its own text, posts the parts
they lack and deletes streamed ones it no longer needs: one reply per turn.

Once: each part's id is recorded (``record``) when it is posted. A turn run again after a
crash opens its stream with those ids (``earlier``) and edits those messages to its own
text; a part deleted meanwhile (404 Unknown Message) is posted anew.

Showing the text as it grows is a courtesy: a failed post or edit is logged, never raised,
and the final reply is delivered with the channel's usual errors and retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

import aiohttp

from channels.base import OutboundMessage, SentMessage
from channels.discord._sdk import discord
from channels.discord.errors import send_error
from channels.discord.format import chunk_message
from channels.streaming import ReplyStream, StreamedMessage, StreamRecorder

log = logging.getLogger(__name__)

#: Seconds between updates of a streamed message (see the module docstring).
EDIT_INTERVAL = 1.0

Target = discord.PartialMessageable
_SHOW_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError)


class DiscordStream(ReplyStream):
    """One turn's reply in one Discord chat, posted then edited; see the module docstring."""

    def __init__(
        self,
        target: Target,
        final: OutboundMessage,
        *,
        allowed_mentions: discord.AllowedMentions,
        on_close: Callable[[DiscordStream], None],
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
        interval: float = EDIT_INTERVAL,
    ) -> None:
        """``final`` is the reply this stream becomes (its text is not used): its delivery
        token gives each part's nonce, so a post repeated after a lost answer is one post.
        ``earlier``/``record``: see the module docstring."""
        self._target = target
        self.final = final
        self._mentions = allowed_mentions
        self._on_close = on_close
        self._interval = interval
        self._text = ""
        #: (message id, content) of each posted part, in order; None: what a message posted
        #: before a crash shows is not known, so it is edited whatever the text.
        self.posted: list[tuple[str, str | None]] = []
        if earlier is not None and earlier.chat_id == final.chat_id:
            self.posted = [(message_id, None) for message_id in earlier.message_ids]
        self._record = record
        #: Posts and edits made while streaming (for the bench's count of API calls).
        self.calls = 0
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._finished = False
        #: When the chat was last asked to post or edit (loop time), for the interval.
        self._last_call = -interval

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<DiscordStream {self.final.reply_to} parts={len(self.posted)}{state}>"

    def append(self, text: str) -> None:
        self._text += text
        self._kick()

    def replace(self, text: str) -> None:
        self._text = text
        self._kick()

    def _kick(self) -> None:
        if self._closed:
            return
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._write_loop(), name="discord-stream")

    async def _write_loop(self) -> None:
        while not self._closed:
            await self._dirty.wait()
            self._dirty.clear()
            async with self._lock:
                if self._closed:
                    return
                try:
                    await self._show(chunk_message(self._text))
                except _SHOW_ERRORS as exc:
                    log.info("streamed Discord text not shown: %s", exc)
            await asyncio.sleep(self._interval)

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

    def _counted(self) -> None:
        self.calls += 1
        self._last_call = asyncio.get_running_loop().time()

    async def finish(self, message: OutboundMessage) -> SentMessage:
        """Turn the streamed messages into the final reply ``message`` (see the module
        docstring); raises ``ChannelSendError`` as a send does."""
        await self._stop_writing()
        self._finished = True
        parts = chunk_message(message.text)
        # The final edit keeps to the interval too (a short wait, once per reply).
        wait = self._last_call + self._interval - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
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

    async def _stop_writing(self) -> None:
        """Stop the writer between rounds: a post or edit cut off in flight would leave
        :attr:`posted` not knowing what the chat shows."""
        self._closed = True
        self._dirty.set()
        task, self._task = self._task, None
        if task is not None:
            async with self._lock:  # the round in flight ends first
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def keep(self) -> None:
        self._finished = True

    async def close(self) -> None:
        """Stop; a turn that ended without its reply (a yield with nothing to say, a stop)
        takes back what it showed, so no half-written message or status line stays."""
        await self._stop_writing()
        self._on_close(self)
        if self._finished:
            return
        self._finished = True
        for message_id, _ in reversed(self.posted):
            try:
                await self._target.get_partial_message(int(message_id)).delete()
            except _SHOW_ERRORS as exc:
                log.info("streamed Discord message not taken back: %s", exc)
        self.posted.clear()

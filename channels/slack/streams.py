"""A Slack reply shown as it is written: native streaming, or a posted message updated.

``native`` uses Slack's streaming methods through slack_sdk's helper
(``AsyncWebClient.chat_stream``: ``chat.startStream``, ``chat.appendStream``,
``chat.stopStream``), in the thread the reply goes to; a native stream only grows, so a
tool-call status line is appended as its own paragraph, and when the final reply differs
from what was streamed the stopped message is updated to it (``chat.update``). ``edit``
posts the text (``chat.postMessage``) and updates it (``chat.update``); text past one
message's limit waits for the final reply, which posts the rest. Either way the chat is
asked at most once every :data:`UPDATE_INTERVAL` seconds (Slack's ``chat.update`` is a
tier-3 method: about 50 a minute per workspace), the final update included.

``auto`` is native in threads and edit elsewhere (Slack streams only thread replies outside
DMs' own threads); when Slack refuses native streaming (an older workspace, a missing scope)
the stream falls back to edit and the channel stops asking for native.

The final reply (the channel's send of the message whose ``reply_to`` is this stream's)
goes through :meth:`SlackStream.finish`: one reply per turn. Showing text as it grows is a
courtesy: a failed update is logged, never raised.

Once: the message's ``ts`` is recorded (``record``) when it is first posted. A turn run
again after a crash opens its stream with it (``earlier``) and goes on by edits of that
message (a native stream cannot be taken over; the dead process's is stopped first, in case
Slack has not ended it yet); a message deleted meanwhile (``message_not_found``) is posted
anew.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import OutboundMessage, SentMessage
from channels.slack.delivery import Poster, announce_metadata, send_error
from channels.slack.format import split_text, to_mrkdwn
from channels.streaming import StreamedMessage, StreamRecorder
from channels.throttled import ThrottledStream

log = logging.getLogger(__name__)

#: Seconds between updates of a streamed message (see the module docstring).
UPDATE_INTERVAL = 1.0
#: Shown at the end of text cut at one message's limit while it is still being written.
MORE = " …"

Mode = Literal["native", "edit"]


class SlackStream(ThrottledStream):
    """One turn's reply in one Slack conversation; see the module docstring."""

    _task_name = "slack-stream"

    def __init__(
        self,
        client: AsyncWebClient,
        poster: Poster,
        final: OutboundMessage,
        *,
        mode: Mode,
        recipient: tuple[str, str | None] | None,
        fallback: bool,
        on_refused: Callable[[], None],
        on_close: Callable[[SlackStream], None],
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
        interval: float = UPDATE_INTERVAL,
    ) -> None:
        """``recipient`` (user id, team id) is who reads a native stream in a channel;
        ``fallback``: when Slack refuses native, go on by edits (``auto``);
        ``earlier``/``record``: see the module docstring."""
        super().__init__(final, on_close=on_close, record=record, interval=interval)
        self._client = client
        self._poster = poster
        self.mode: Mode = mode
        self._recipient = recipient
        self._fallback = fallback
        self._on_refused = on_refused
        #: Native: the helper, and the text whose growth was appended so far.
        self._native: AsyncChatStream | None = None
        self._basis = ""
        #: The message showing the reply (its ts) and what it shows (None: not known, a
        #: message posted before a crash).
        self.ts: str | None = None
        self._shown: str | None = ""
        #: A message a run before a crash posted, maybe still a native stream: stop it
        #: before the first edit.
        self._stale = False
        if earlier is not None and earlier.chat_id == final.chat_id and earlier.message_ids:
            self.mode, self.ts, self._shown, self._stale = (
                "edit",
                earlier.message_ids[0],
                None,
                True,
            )

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<SlackStream {self.mode} {self.final.reply_to} ts={self.ts}{state}>"

    async def _show_round(self, text: str) -> None:
        try:
            await self._show(text)
        except Exception as exc:
            log.info("streamed Slack text not shown: %s", send_error("stream", exc))

    async def _show(self, text: str) -> None:
        if not text.strip():
            return
        if self.mode == "native":
            try:
                await self._show_native(text)
                return
            except SlackApiError as exc:
                if self._native is not None and self._native.ts is not None:
                    raise  # started, then failed: not a refusal
                self._native = None
                self._on_refused()
                if not self._fallback:
                    raise
                log.info("slack: native streaming refused (%s); editing instead", exc)
                self.mode = "edit"
        await self._show_edit(text)

    async def _show_native(self, text: str) -> None:
        if self._native is None:
            user, team = self._recipient or (None, None)
            self._native = await self._client.chat_stream(
                channel=self.final.chat_id,
                thread_ts=self.final.thread_id or "",
                recipient_user_id=user,
                recipient_team_id=team,
                buffer_size=1,  # this class decides when to send: at most once an interval
            )
        piece = text[len(self._basis) :] if text.startswith(self._basis) else f"\n\n{text}"
        self._basis = text
        if piece:
            await self._native.append(markdown_text=piece)
            self._counted()
            first = self.ts is None
            self.ts = self._native.ts
            if first:
                await self._recorded()

    async def _show_edit(self, text: str) -> None:
        chunks = split_text(to_mrkdwn(text), self._poster.chunk_limit)
        shown = chunks[0] + (MORE if len(chunks) > 1 else "")
        if shown == self._shown:
            return
        if self.ts is not None:
            await self._end_stale()
            try:
                await self._client.chat_update(channel=self.final.chat_id, ts=self.ts, text=shown)
            except SlackApiError as exc:
                if not _gone(exc):
                    raise
                self.ts = None  # deleted meanwhile: posted anew below
        if self.ts is None:
            response = await self._client.chat_postMessage(
                channel=self.final.chat_id, text=shown, thread_ts=self.final.thread_id
            )
            self.ts = str(response.get("ts") or "")
            await self._recorded()
        self._counted()
        self._shown = shown

    async def _end_stale(self) -> None:
        """Stop the native stream a dead process may have left open on the message taken
        over (an edit of a message still streaming may be refused); its error (not a
        stream, or ended already) is the common case and ignored."""
        if not self._stale or self.ts is None:
            return
        self._stale = False
        try:
            await self._client.chat_stopStream(channel=self.final.chat_id, ts=self.ts)
            self._counted()
        except SlackApiError:
            pass

    async def _recorded(self) -> None:
        """Keep the message's ts (see the module docstring); a failure is only logged."""
        if self._record is None or self.ts is None:
            return
        try:
            await self._record(
                StreamedMessage(self.final.chat_id, self.final.thread_id, (self.ts,))
            )
        except Exception as exc:
            log.warning("streamed Slack message not recorded: %s", exc)

    async def finish(self, message: OutboundMessage) -> SentMessage:
        """Make the streamed message the final reply ``message``; raises
        ``ChannelSendError`` as a send does. Nothing shown yet: posted as usual."""
        await self._stop_writing()
        self._finished = True
        if self.ts is None:
            return await self._poster.post(message)
        await self._keep_interval()
        chunks = self._poster.chunks(message)
        try:
            if self._native is not None:
                await self._native.stop()
                self._native = None
            await self._end_stale()
            ids = [self.ts]
            # Always updated once: the reply's metadata (what finds it after a crash, as for
            # a reply posted whole) goes on with the final text.
            try:
                await self._client.chat_update(
                    channel=message.chat_id,
                    ts=self.ts,
                    text=chunks[0] if chunks else self._shown or "",
                    metadata=announce_metadata(message, 0, len(chunks)),
                )
            except SlackApiError as exc:
                if not _gone(exc):
                    raise
                gone = True  # deleted meanwhile: the reply is posted whole, below
            else:
                gone = False
            for part, chunk in enumerate([] if gone else chunks[1:], start=1):
                response = await self._client.chat_postMessage(
                    channel=message.chat_id,
                    text=chunk,
                    thread_ts=message.thread_id,
                    metadata=announce_metadata(message, part, len(chunks)),
                )
                ids.append(str(response.get("ts") or ""))
        except Exception as exc:
            raise send_error("chat.update", exc) from exc
        if gone:
            return await self._poster.post(message)
        return SentMessage(chat_id=message.chat_id, message_ids=tuple(ids))

    async def _take_back(self) -> None:
        native, self._native = self._native, None
        try:
            if native is not None and native.ts is not None:
                await native.stop()
            if self.ts is not None:
                await self._client.chat_delete(channel=self.final.chat_id, ts=self.ts)
        except Exception as exc:
            log.info("slack: streamed message not taken back: %s", send_error("chat.delete", exc))


def _gone(exc: SlackApiError) -> bool:
    """Whether Slack refused an update because the message is no longer there."""
    data = getattr(exc.response, "data", None)
    return isinstance(data, dict) and data.get("error") == "message_not_found"

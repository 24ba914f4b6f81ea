"""A Slack reply shown as it is written: native streaming, or a posted message updated.

``native`` uses Slack's streaming methods through slack_sdk's helper
(``AsyncWebClient.chat_stream``: ``chat.startStream``, ``chat.appendStream``,
``chat.stopStream``), in the thread the reply goes to; a native stream only grows, so a
tool-call status line is appended as its own paragraph, and when the final reply differs
from what was streamed the stopped message is updated to it (``chat.update``). A piece
longer than Slack's limit for one call (:data:`STREAM_APPEND_LIMIT`) goes in several calls.
``edit`` posts the text (``chat.postMessage``) and updates it (``chat.update``); text past one
message's limit waits for the final reply, which posts the rest. Either way the chat is
asked at most once every :data:`UPDATE_INTERVAL` seconds (Slack's ``chat.update`` is a
tier-3 method: about 50 a minute per workspace), the final update included.

``auto`` is native in threads and edit elsewhere (Slack streams only thread replies outside
DMs' own threads); when Slack refuses native streaming (an older workspace, a missing scope)
the stream falls back to edit and the channel stops asking for native.

The final reply is never lost to a stream Slack gave up on. Slack ends a stream on its own
(one left without appends for a while, one the person stopped), and then refuses its
appends and its stop (``message_not_in_streaming_state``); any call of a started stream may
fail. A refused append hands the message over to edits (the stream is stopped first, in
case it is still open; its refusal ignored); a refused stop is logged and the message is
updated to the final reply all the same. Where that update is refused too, the reply is
posted whole (once: the poster resumes after the chunks that landed) and the half-written
message is deleted; a message gone meanwhile (``message_not_found``) is posted anew.

The final reply goes through :meth:`SlackStream.finish`, on the reply the turn holds: one
reply per turn. Showing text as it grows is a
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
from channels.slack.constants import STREAM_APPEND_LIMIT
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
        on_sent: Callable[[OutboundMessage, SentMessage], None],
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
        interval: float = UPDATE_INTERVAL,
    ) -> None:
        """``recipient`` (user id, team id) is who reads a native stream in a channel;
        ``fallback``: when Slack refuses native, go on by edits (``auto``); ``on_sent`` is
        told of the final reply's messages; ``earlier``/``record``: see the module
        docstring."""
        super().__init__(final, record=record, interval=interval)
        self._client = client
        self._poster = poster
        self.mode: Mode = mode
        self._recipient = recipient
        self._fallback = fallback
        self._on_refused = on_refused
        self._on_sent = on_sent
        #: Native: the helper, and the text whose growth was appended so far.
        self._native: AsyncChatStream | None = None
        self._basis = ""
        #: The message showing the reply (its ts) and what it shows (None: not known, a
        #: message posted before a crash).
        self.ts: str | None = None
        self._shown: str | None = ""
        #: A message a run before a crash posted, or one whose native stream Slack refused,
        #: maybe still streaming: stop it before the first edit.
        self._stale = False
        #: The final reply's later parts already posted beside the streamed message (a
        #: finish tried again resumes after them).
        self._rest: list[str] = []
        #: The streamed message, once the final reply is posted whole instead: deleted.
        self._orphan: str | None = None
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
            except Exception as exc:
                if self._native is not None and self._native.ts is not None:
                    self._leave_native(exc)  # started, then failed: not a refusal
                    return
                self._native, self._basis = None, ""  # not started: the next round starts
                if not isinstance(exc, SlackApiError):
                    raise
                self._on_refused()
                if not self._fallback:
                    raise
                log.info("slack: native streaming refused (%s); editing instead", _why(exc))
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
        for start in range(0, len(piece), STREAM_APPEND_LIMIT):
            await self._native.append(markdown_text=piece[start : start + STREAM_APPEND_LIMIT])
            self._counted()
            first = self.ts is None
            self.ts = self._native.ts
            if first:
                await self._recorded()

    def _leave_native(self, exc: Exception) -> None:
        """Slack refused a call of the started stream (see the module docstring): the
        message goes on by edits, from the next round (one more is asked for, so the
        text shows even if the model writes nothing more)."""
        log.info("slack: native stream refused (%s); updating the message instead", _why(exc))
        self._native = None
        self.mode, self._shown, self._stale = "edit", None, True
        self._dirty.set()

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

    async def _finish(self, message: OutboundMessage) -> SentMessage:
        sent = await self._finish_reply(message)
        self._on_sent(message, sent)
        return sent

    async def _finish_reply(self, message: OutboundMessage) -> SentMessage:
        """Make the streamed message the final reply ``message``; raises
        ``ChannelSendError`` as a send does. Nothing shown yet: posted as usual; shown in a
        message Slack will not update: posted whole (see the module docstring)."""
        await self._stop_writing()
        self._finished = True
        if self.ts is not None:
            await self._keep_interval()
            try:
                sent = await self._finish_in_place(message)
            except Exception as exc:
                raise send_error("chat.update", exc) from exc
            if sent is not None:
                return sent
        sent = await self._poster.post(message)
        await self._delete_orphan()
        return sent

    async def _finish_in_place(self, message: OutboundMessage) -> SentMessage | None:
        """Update the streamed message to the reply's first part and post the rest; None
        when Slack refuses the update (the message is then posted whole)."""
        assert self.ts is not None
        await self._stop_native()
        await self._end_stale()
        chunks = self._poster.chunks(message)
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
            if send_error("chat.update", exc).retryable:
                raise
            log.warning("slack: the streamed reply not updated (%s); posting it whole", _why(exc))
            self._orphan = None if _gone(exc) else self.ts
            self.ts = None
            return None
        for part in range(1 + len(self._rest), len(chunks)):
            response = await self._client.chat_postMessage(
                channel=message.chat_id,
                text=chunks[part],
                thread_ts=message.thread_id,
                metadata=announce_metadata(message, part, len(chunks)),
            )
            self._rest.append(str(response.get("ts") or ""))
        return SentMessage(chat_id=message.chat_id, message_ids=(self.ts, *self._rest))

    async def _stop_native(self) -> None:
        """Stop the native stream; Slack may refuse (it ended the stream itself): the
        message is updated all the same, after one more plain stop in case it is open."""
        native, self._native = self._native, None
        if native is None:
            return
        try:
            await native.stop()
            self._counted()
        except Exception as exc:
            log.info("slack: native stream not stopped (%s); updating the message", _why(exc))
            self._stale = True

    async def _delete_orphan(self) -> None:
        """Delete the half-written message of a reply posted whole; a failure is logged."""
        orphan, self._orphan = self._orphan, None
        if orphan is None:
            return
        try:
            await self._client.chat_delete(channel=self.final.chat_id, ts=orphan)
        except Exception as exc:
            log.warning("slack: streamed message not deleted: %s", _why(exc))

    async def _take_back(self) -> None:
        native, self._native = self._native, None
        try:
            if native is not None and native.ts is not None:
                await native.stop()
            if self.ts is not None:
                await self._client.chat_delete(channel=self.final.chat_id, ts=self.ts)
        except Exception as exc:
            log.info("slack: streamed message not taken back: %s", send_error("chat.delete", exc))


def _why(exc: BaseException) -> str:
    """A failed call in one line for the log: Slack's error code and HTTP status, or the
    connection failure (never the token, never the request)."""
    return str(send_error("call", exc)).removeprefix("slack call: ")


def _gone(exc: SlackApiError) -> bool:
    """Whether Slack refused an update because the message is no longer there."""
    data = getattr(exc.response, "data", None)
    return isinstance(data, dict) and data.get("error") == "message_not_found"

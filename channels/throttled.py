"""A reply shown in chat messages that are posted, then edited at most once an interval: what
the Discord and Slack streams decide alike (:class:`ThrottledStream`); each says the rest."""

from __future__ import annotations

import abc
import asyncio
import dataclasses

from channels.base import OutboundMessage, Reply, SentMessage
from channels.streaming import StreamRecorder


class ThrottledStream(Reply):
    """A reply shown in chat messages that are posted, then edited at most once an interval.

    What every such stream decides alike lives here: the text is kept as it grows, one
    writer task shows the newest text then waits out the interval (pieces that arrive
    meanwhile are shown together in the next round), the final reply keeps to the interval
    too, and stopping waits for the round in flight, so that what the chat shows is known.
    A subclass says how a round shows the text (:meth:`_show_round`, which logs and never
    raises), how the final reply is made (:meth:`_finish`) and how a reply that never came
    is taken back (:meth:`_take_back`).
    """

    streams = True

    #: The writer task's name (for logs and task dumps).
    _task_name = "reply-stream"

    def __init__(
        self,
        final: OutboundMessage,
        *,
        record: StreamRecorder | None,
        interval: float,
    ) -> None:
        """``final`` is the reply this stream becomes (its text is not used); ``record``
        keeps what it posted (see :mod:`channels.streaming`)."""
        self.final = final
        self._record = record
        self._interval = interval
        self._text = ""
        #: Posts and edits made while streaming (for the bench's count of API calls).
        self.calls = 0
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._finished = False
        #: When the chat was last asked to post or edit (loop time), for the interval.
        self._last_call = -interval

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
            self._task = asyncio.create_task(self._write_loop(), name=self._task_name)

    async def _write_loop(self) -> None:
        while not self._closed:
            await self._dirty.wait()
            self._dirty.clear()
            async with self._lock:
                if self._closed:
                    return
                await self._show_round(self._text)
            await asyncio.sleep(self._interval)

    @abc.abstractmethod
    async def _show_round(self, text: str) -> None:
        """Show ``text`` (the whole reply so far) in the chat; a failure is logged, never
        raised: showing the text as it grows is a courtesy."""

    def _counted(self) -> None:
        """The chat was asked to post or edit just now."""
        self.calls += 1
        self._last_call = asyncio.get_running_loop().time()

    async def _keep_interval(self) -> None:
        """Wait until the interval since the chat was last asked is over (the final edit
        keeps to it too: a short wait, once per reply)."""
        wait = self._last_call + self._interval - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _stop_writing(self) -> None:
        """Stop the writer between rounds: a post or edit cut off in flight would leave the
        stream not knowing what the chat shows."""
        self._closed = True
        self._dirty.set()
        task, self._task = self._task, None
        if task is not None:
            async with self._lock:  # the round in flight ends first
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def finish(self, text: str) -> SentMessage:
        return await self._finish(dataclasses.replace(self.final, text=text))

    @abc.abstractmethod
    async def _finish(self, message: OutboundMessage) -> SentMessage:
        """Make what was streamed the final reply ``message``; raises ``ChannelSendError``
        as a send does. Begins with :meth:`_stop_writing`."""

    def keep(self) -> None:
        self._finished = True

    async def close(self) -> None:
        """Stop; a turn that ended without its reply (a yield with nothing to say, a stop)
        takes back what it showed, so no half-written message or status line stays."""
        await self._stop_writing()
        if self._finished:
            return
        self._finished = True
        await self._take_back()

    @abc.abstractmethod
    async def _take_back(self) -> None:
        """Delete what was shown of a reply that never came; a failure is logged."""

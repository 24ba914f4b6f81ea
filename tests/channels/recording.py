"""What a streamed reply said it posted (the ``record`` callback of ``open_reply``), for
the channels' tests of a turn run again after a crash."""

from __future__ import annotations

import asyncio

from channels import StreamedMessage

#: Seconds a test waits for a record before it fails (a guard, not a timing assertion).
WAIT_GUARD = 10.0


class Recorded:
    """The ``record`` callback: what the stream said it posted, in order."""

    def __init__(self) -> None:
        self.shown: list[StreamedMessage] = []
        self._changed = asyncio.Condition()

    async def __call__(self, shown: StreamedMessage) -> None:
        async with self._changed:
            self.shown.append(shown)
            self._changed.notify_all()

    async def wait(self, count: int) -> StreamedMessage:
        """The ``count``-th record, once made (a guard timeout, not a timing assertion)."""
        async with asyncio.timeout(WAIT_GUARD), self._changed:
            await self._changed.wait_for(lambda: len(self.shown) >= count)
        return self.shown[count - 1]

"""The ``chat_cursors`` table: the newest message taken per chat of a channel.

Discord replays nothing to a fresh gateway session, so the Discord channel reads, after each
READY, what each chat it serves received past its cursor while no connection was up
(:mod:`channels.discord.catchup`). A cursor only moves forward; chats whose cursor did not
move for a while are not read again (the catch-up reaches back that far at most).
"""

from __future__ import annotations

import time

from channels.cursors import ChatCursor
from gateway.state._sql import Database
from gateway.state.connection import Connection


class CursorTable:
    """Data access for ``chat_cursors``; also a :class:`channels.cursors.ChatCursors`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def advance(self, cursor: ChatCursor) -> None:
        """Move the chat's cursor to ``cursor.message_id`` unless it is past it already."""

        def run(conn: Connection) -> None:
            newest = conn.dialect.larger("chat_cursors.message_id", "excluded.message_id")
            conn.queue(
                "INSERT INTO chat_cursors"
                " (channel, account, chat_id, chat_type, message_id, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (channel, account, chat_id) DO UPDATE"
                f" SET message_id = {newest},"
                " chat_type = excluded.chat_type, updated_at = excluded.updated_at",
                (
                    cursor.channel,
                    cursor.account,
                    cursor.chat_id,
                    cursor.chat_type,
                    cursor.message_id,
                    time.time(),
                ),
            )

        await self._db.write(run)

    async def recent(self, channel: str, account: str, since: float) -> list[ChatCursor]:
        """The cursors of ``channel`` for ``account`` that moved at or after ``since``."""

        def run(conn: Connection) -> list[ChatCursor]:
            rows = conn.execute(
                "SELECT chat_id, chat_type, message_id FROM chat_cursors"
                " WHERE channel = ? AND account = ? AND updated_at >= ? ORDER BY chat_id",
                (channel, account, since),
            ).fetchall()
            return [
                ChatCursor(channel, account, str(chat), "dm" if kind == "dm" else "channel", int(i))
                for chat, kind, i in rows
            ]

        return await self._db.read(run)

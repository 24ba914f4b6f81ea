"""Session keys: built and parsed here, nowhere else.

Forms::

    agent:<agentId>:main
    agent:<agentId>:subagent:<uuid>
    agent:<agentId>:webchat:<clientId>
    agent:<agentId>:<channel>:dm:<userId>
    agent:<agentId>:<channel>:channel:<chatId>[:thread:<threadId>]

Every id segment matches ``^[a-z0-9][a-z0-9_-]{0,63}$``. Raw ids from chats go through
:func:`normalize_id` when a key is *built*; :meth:`SessionKey.parse` never normalises, it
rejects anything that is not already a well-formed key, so a key read from an HTTP path, a
tool argument or a file is either exactly a key Herald could have built or an
:class:`SessionKeyError`.

Normalising lowercases ASCII letters and maps ``.`` to ``_`` (Slack's thread ts
``1712345678.123456`` becomes ``1712345678_123456``). Any other character outside
``[a-z0-9_-]``, a leading ``_``/``-`` or more than 64 characters make the id *lossy*: it
becomes a readable head plus ``-`` and 16 hex digits of the SHA-256 of the raw text, so
distinct raw ids stay distinct (apart from ASCII case and ``.``/``_``, which no chat
provider uses to tell ids apart). Web chat client ids are chosen by the client, where ``Ab``
and ``aB`` are two browsers: they are normalised *exactly*, any id not already normalised
taking the hash, so that only equal ids share a session. So that a client cannot choose
another's hashed id as its own (``victim-426173ddfcafbdd5``), exact normalising hashes a raw
id of that shape too: raw ids kept as they are and hashed ids are disjoint sets. Other valid
ids are fixed points: ``normalize_id(normalize_id(x)) == normalize_id(x)``. The exact raw
thread ts is kept in the session's origin, not in the key, because replies need it verbatim."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from dataclasses import dataclass
from typing import Final, Literal

from gateway.constants import ID_PATTERN
from gateway.sessions.errors import InvalidIdError, SessionKeyError

KeyForm = Literal["main", "subagent", "webchat", "dm", "channel"]
#: The session kinds the state database knows (``sessions.kind``).
SessionKind = Literal["main", "chat", "subagent"]

KEY_PREFIX: Final = "agent"
#: The longest well-formed key is 280 characters (five 64-character ids and the literals).
MAX_KEY_LENGTH: Final = 320
#: Hex digits of SHA-256 kept for lossy ids: 64 bits, so accidental collisions are negligible.
_HASH_DIGITS: Final = 16
_MAX_ID: Final = 64
_ALLOWED: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
#: The shape of a hashed id's tail (or of a hashed id with no readable head).
_HASHED_SHAPE: Final = re.compile(r"(?:^|-)[0-9a-f]{16}\Z")
#: Segments that name a key form and so cannot be a channel name.
_RESERVED_CHANNELS: Final = frozenset({"main", "subagent", "webchat"})


def is_valid_id(value: str) -> bool:
    """True when ``value`` is already a normalised id (``fullmatch``: no trailing newline)."""
    return ID_PATTERN.fullmatch(value) is not None


def normalize_id(raw: str, *, exact: bool = False) -> str:
    """Turn a raw id from a chat provider or client into a safe id, deterministically.

    Raises :class:`InvalidIdError` for an empty string. The result always matches
    ``^[a-z0-9][a-z0-9_-]{0,63}$`` and so is safe in a key and in a path segment. With
    ``exact``, ids that differ only in case or in ``.``/``_`` stay distinct too, and a raw
    id shaped like a hashed one is hashed, so no raw id can equal another's hashed id.
    """
    if not isinstance(raw, str) or not raw:
        raise InvalidIdError("an id cannot be empty")
    if is_valid_id(raw) and not (exact and _HASHED_SHAPE.search(raw)):
        return raw
    mapped: list[str] = []
    lossy = False
    for ch in raw:
        if ch in _ALLOWED:
            mapped.append(ch)
        elif "A" <= ch <= "Z":
            mapped.append(ch.lower())
            lossy = lossy or exact
        elif ch == ".":
            mapped.append("_")
            lossy = lossy or exact
        else:
            mapped.append("_")
            lossy = True
    text = "".join(mapped)
    if not lossy and is_valid_id(text) and not (exact and _HASHED_SHAPE.search(text)):
        return text
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_DIGITS]
    head = text.lstrip("_-")[: _MAX_ID - _HASH_DIGITS - 1]
    return f"{head}-{digest}" if head else digest


def require_id(value: str, what: str) -> str:
    """Return ``value`` if it is a normalised id, else raise :class:`InvalidIdError`."""
    if not isinstance(value, str) or not is_valid_id(value):
        raise InvalidIdError(f"{what} {value!r:.80} must match {ID_PATTERN.pattern}")
    return value


def is_uuid(value: str) -> bool:
    """True when ``value`` is a UUID in canonical lowercase form (as ``str(uuid4())``)."""
    try:
        return str(uuid.UUID(value)) == value
    except (ValueError, TypeError, AttributeError):
        return False


#: uuid4s made from one read of the system's random source. Each ``os.urandom`` call is a
#: system call that lets the other threads take the GIL, which a spawn (three ids) paid
#: three times on the accept path; drawn in batches, it is paid once per this many ids.
_UUIDS_PER_DRAW: Final = 64
_ready_uuids: list[str] = []


def new_uuid() -> str:
    """A random UUID (version 4) string, as ``str(uuid.uuid4())``: the same source
    (``os.urandom``), read for many ids at once."""
    while True:
        try:
            return _ready_uuids.pop()  # atomic: threads never get the same id
        except IndexError:
            data = os.urandom(16 * _UUIDS_PER_DRAW)
            _ready_uuids.extend(
                str(uuid.UUID(bytes=data[i : i + 16], version=4)) for i in range(0, len(data), 16)
            )


# A forked child must not hand out the ids its parent holds too.
os.register_at_fork(after_in_child=_ready_uuids.clear)


def new_session_id() -> str:
    """A fresh session id: a uuid4 string. Only these (and agent ids) ever form paths."""
    return new_uuid()


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A parsed session key. Construction validates, so every instance prints a safe key.

    ``subject`` is what the session is with: the sub-agent uuid, the web chat client id,
    the DM user id or the channel id, by ``form``; ``channel`` names the chat provider for
    ``dm``/``channel`` forms (and is ``"webchat"`` for the web chat form).
    """

    agent_id: str
    form: KeyForm
    channel: str | None = None
    subject: str | None = None
    thread_id: str | None = None

    def __post_init__(self) -> None:
        require_id(self.agent_id, "agent id")
        if self.form == "main":
            if self.channel or self.subject or self.thread_id:
                raise InvalidIdError("a main session key has no channel, subject or thread")
        elif self.form == "subagent":
            if self.subject is None or not is_uuid(self.subject):
                raise InvalidIdError(f"sub-agent id {self.subject!r:.80} must be a lowercase uuid")
            if self.channel or self.thread_id:
                raise InvalidIdError("a sub-agent session key has no channel or thread")
        elif self.form == "webchat":
            if self.channel != "webchat" or self.thread_id:
                raise InvalidIdError("a web chat session key has channel 'webchat' and no thread")
            require_id(self.subject or "", "web chat client id")
        elif self.form in ("dm", "channel"):
            require_id(self.channel or "", "channel name")
            if self.channel in _RESERVED_CHANNELS:
                raise InvalidIdError(f"{self.channel!r} is not a chat channel name")
            require_id(self.subject or "", "chat id" if self.form == "channel" else "user id")
            if self.thread_id is not None:
                if self.form == "dm":
                    raise InvalidIdError("a DM session key has no thread")
                require_id(self.thread_id, "thread id")
        else:
            raise InvalidIdError(f"unknown session key form {self.form!r}")

    # -- builders ---------------------------------------------------------------------------

    @classmethod
    def main(cls, agent_id: str) -> SessionKey:
        """``agent:<agentId>:main``."""
        return cls(agent_id, "main")

    @classmethod
    def subagent(cls, agent_id: str, child_uuid: str | None = None) -> SessionKey:
        """``agent:<agentId>:subagent:<uuid>``; a fresh uuid4 unless one is given."""
        return cls(agent_id, "subagent", subject=child_uuid or new_uuid())

    @classmethod
    def webchat(cls, agent_id: str, client_id: str) -> SessionKey:
        """``agent:<agentId>:webchat:<clientId>`` with the raw client id normalised exactly
        (client ids that differ only in case are different browsers)."""
        subject = normalize_id(client_id, exact=True)
        return cls(agent_id, "webchat", channel="webchat", subject=subject)

    @classmethod
    def dm(cls, agent_id: str, channel: str, user_id: str) -> SessionKey:
        """``agent:<agentId>:<channel>:dm:<userId>`` with the raw user id normalised."""
        return cls(agent_id, "dm", channel=channel, subject=normalize_id(user_id))

    @classmethod
    def chat_channel(
        cls, agent_id: str, channel: str, chat_id: str, thread_id: str | None = None
    ) -> SessionKey:
        """``agent:<agentId>:<channel>:channel:<chatId>[:thread:<threadId>]``, ids normalised."""
        thread = normalize_id(thread_id) if thread_id else None
        return cls(
            agent_id, "channel", channel=channel, subject=normalize_id(chat_id), thread_id=thread
        )

    @classmethod
    def parse(cls, raw: str) -> SessionKey:
        """Parse a key string exactly; raise :class:`SessionKeyError` if it is not one."""
        if not isinstance(raw, str):
            raise SessionKeyError(repr(raw), "a session key is a string")
        if not raw:
            raise SessionKeyError(raw, "empty")
        if len(raw) > MAX_KEY_LENGTH:
            raise SessionKeyError(raw, f"longer than {MAX_KEY_LENGTH} characters")
        parts = raw.split(":")
        if len(parts) < 3 or parts[0] != KEY_PREFIX:
            raise SessionKeyError(raw, "expected 'agent:<agentId>:…'")
        agent_id, rest = parts[1], parts[2:]
        try:
            match rest:
                case ["main"]:
                    return cls(agent_id, "main")
                case ["subagent", child]:
                    return cls(agent_id, "subagent", subject=child)
                case ["webchat", client]:
                    return cls(agent_id, "webchat", channel="webchat", subject=client)
                case [channel, "dm", user]:
                    return cls(agent_id, "dm", channel=channel, subject=user)
                case [channel, "channel", chat]:
                    return cls(agent_id, "channel", channel=channel, subject=chat)
                case [channel, "channel", chat, "thread", thread]:
                    return cls(agent_id, "channel", channel=channel, subject=chat, thread_id=thread)
        except InvalidIdError as exc:
            raise SessionKeyError(raw, str(exc)) from None
        raise SessionKeyError(raw, "not one of the session key forms")

    # -- views ------------------------------------------------------------------------------

    def __str__(self) -> str:
        head = f"{KEY_PREFIX}:{self.agent_id}"
        match self.form:
            case "main":
                return f"{head}:main"
            case "subagent":
                return f"{head}:subagent:{self.subject}"
            case "webchat":
                return f"{head}:webchat:{self.subject}"
            case "dm":
                return f"{head}:{self.channel}:dm:{self.subject}"
        tail = f":thread:{self.thread_id}" if self.thread_id else ""
        return f"{head}:{self.channel}:channel:{self.subject}{tail}"

    @property
    def is_subagent(self) -> bool:
        return self.form == "subagent"

    @property
    def session_kind(self) -> SessionKind:
        """The kind recorded in the state database."""
        if self.form == "main":
            return "main"
        if self.form == "subagent":
            return "subagent"
        return "chat"


def parse_key(raw: str) -> SessionKey:
    """Shorthand for :meth:`SessionKey.parse`."""
    return SessionKey.parse(raw)


def is_subagent_key(raw: str) -> bool:
    """True when ``raw`` is a well-formed sub-agent session key."""
    try:
        return SessionKey.parse(raw).is_subagent
    except SessionKeyError:
        return False


def key_for_inbound(
    agent_id: str,
    channel: str,
    chat_type: str,
    chat_id: str,
    thread_id: str | None,
    sender_id: str,
) -> SessionKey:
    """The session key for a chat message, as the router files it.

    Web chat: one session per client (``chat_id`` is the client id). DMs: one session per
    user (``sender_id``), threads ignored. Channels: one per channel, or per thread when
    ``thread_id`` is given (the router decides which messages count as threaded).
    """
    if channel == "webchat":
        return SessionKey.webchat(agent_id, chat_id)
    if chat_type == "dm":
        return SessionKey.dm(agent_id, channel, sender_id)
    if chat_type != "channel":
        raise InvalidIdError(f"chat type {chat_type!r:.40} is not 'dm' or 'channel'")
    return SessionKey.chat_channel(agent_id, channel, chat_id, thread_id)

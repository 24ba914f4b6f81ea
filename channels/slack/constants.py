"""Named values of the Slack channel. Each non-obvious number says why."""

from __future__ import annotations

from typing import Final

#: slack_sdk's default Web API root; ``apiBaseUrl`` replaces it (trailing slash kept).
DEFAULT_API_BASE_URL: Final = "https://slack.com/api/"

#: HTTP mode's Events API request URL on the gateway's own app.
EVENTS_PATH: Final = "/slack/events"

#: Longest chunk one reply message gets. Slack truncates ``text`` beyond 40,000 characters
#: and asks clients to keep messages under 4,000; long posts collapse behind "Show more" and
#: stop producing notifications around 3,000, so chunks stay at that.
CHUNK_LIMIT: Final = 3_000

#: Most text one native streaming call (``chat.startStream``/``appendStream``) carries:
#: Slack's documented ``markdown_text`` limit. A longer call is refused (``msg_too_long``),
#: and slack_sdk's helper keeps the refused text for its next call, so one oversized piece
#: would fail every later one: a longer piece goes in several calls.
STREAM_APPEND_LIMIT: Final = 12_000

#: Inbound text beyond this is cut: Slack's own ``text`` limit, so nothing real is lost.
MAX_INBOUND_CHARS: Final = 40_000

#: Message keys (channel:ts) remembered in memory to drop the message/app_mention pair of
#: one post, which Slack sends moments apart: 2,000 cover well over ten events a second in
#: ~200 KB. Also the bound of event ids and signatures when no durable store is given.
DEDUPE_CAPACITY: Final = 2_000

#: Seconds an event id, trigger id or request signature stays remembered after it was last
#: seen. Slack's signature check accepts a timestamp up to five minutes either side of now,
#: so a signed request can be replayed until ten minutes after it arrived; each of Slack's
#: retries (the last about five minutes after the first) renews its event's entry.
REPLAY_WINDOW_SECONDS: Final = 600.0

#: Threads the bot takes part in; replies there need no mention. The most recent 2,000
#: (an older thread needs a mention again).
ACTIVE_THREADS_CAPACITY: Final = 2_000

#: Messages whose send failed part-way: the next try resumes after the chunks that landed.
PARTIAL_SENDS_CAPACITY: Final = 256

#: Message metadata ``event_type`` of announce chunks, found again after a crash by it.
ANNOUNCE_EVENT_TYPE: Final = "herald_announce"

#: A cut-off send is looked for from this many seconds before its first attempt: Slack's
#: clock and the gateway's may differ a little.
LOOKUP_CLOCK_SKEW: Final = 60.0

#: Messages per ``conversations.history``/``replies`` page, and pages read at most, when
#: looking for a cut-off send: 2,000 messages since the attempt began is a very busy chat;
#: beyond that the lookup answers "cannot tell" rather than read on.
LOOKUP_PAGE_SIZE: Final = 200
LOOKUP_MAX_PAGES: Final = 10

#: A reply waits out a 429 in place once if Slack asks for at most this many seconds;
#: longer waits, and announces, go back to the outbox with ``retry_after``.
INLINE_RETRY_AFTER_MAX: Final = 10.0

#: Inbound handler calls in flight at once; beyond this messages are dropped and logged
#: (the gateway's handler only enqueues, so reaching it means the gateway is stuck).
MAX_PENDING_INBOUND: Final = 1_000

#: Seconds ``start()`` waits for the Socket Mode websocket before giving up.
CONNECT_TIMEOUT: Final = 30.0

#: Seconds an event's ack waits for the inbound handler to take the message (record and
#: queue it); Slack wants its ack within 3 seconds, so a stuck handler cannot hold it longer.
ACCEPT_WAIT: Final = 1.5

#: Seconds ``stop()`` lets in-flight inbound handler calls finish before cancelling them.
STOP_GRACE: Final = 5.0

#: Web API request timeout in seconds (slack_sdk's own default).
API_TIMEOUT: Final = 30.0

#: Reaction shown on the person's message while the agent works on it.
WORKING_REACTION: Final = "hourglass_flowing_sand"

#: The chat commands, registered as Slack slash commands and accepted as text
#: (``/spawn …`` after a mention, or ``!spawn …`` since Slack's composer eats a leading "/").
COMMANDS: Final = ("spawn", "subagents", "stop")

#: Message subtypes that carry a person's words; every other subtype (edits, deletions,
#: joins, topic changes, bot posts) is ignored.
ACCEPTED_SUBTYPES: Final = frozenset({"file_share", "thread_broadcast", "me_message"})

#: Slack ``error`` codes worth trying again; any other ``ok: false`` is permanent.
TRANSIENT_ERRORS: Final = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",
    }
)

"""A web chat reply relayed between replicas travels in notices that each fit PostgreSQL's
8,000-byte payload, however long the piece (a model that answered whole) and whatever it
holds (quotes and control characters grow when escaped, other scripts take several bytes)."""

from __future__ import annotations

import orjson

from channels.webchat.relay import RelayedDelta
from gateway.cluster.notify import DELTA_REF_BYTES, decode_delta, delta_notices

#: The PostgreSQL limit: a payload must be shorter than this.
NOTIFY_LIMIT = 8000


def notice_bytes(ref: str) -> int:
    """The whole payload the relay sends for ``ref``, with a long schema and replica id."""
    note = {"s": "s" * 63, "r": "replica-" + "r" * 56, "t": "webchat-delta", "c": ref}
    return len(orjson.dumps(note))


def test_a_long_piece_is_split_into_notices_that_fit_and_join_up_again() -> None:
    text = ('Tea "reached" Europe\n\x01 — 茶は' * 800)[:19_999]
    notices = delta_notices(RelayedDelta("alice", "turn-1", 12, text))
    assert len(notices) > 1
    assert all(notice_bytes(ref) < NOTIFY_LIMIT for ref in notices)
    assert all(len(orjson.dumps(ref)) <= DELTA_REF_BYTES for ref in notices)
    shown = "x" * 12  # what the receiving replica had
    for ref in notices:
        delta = decode_delta(ref)
        assert delta is not None
        assert not delta.end
        assert delta.at == len(shown)
        shown += delta.text
    assert shown == "x" * 12 + text


def test_a_reset_stays_on_the_first_piece_and_an_end_on_the_last() -> None:
    text = "\x02" * 4000  # 6 bytes each, escaped: several notices
    deltas = [decode_delta(ref) for ref in delta_notices(RelayedDelta("a", "t", 0, text, True))]
    assert [d.reset for d in deltas if d] == [True] + [False] * (len(deltas) - 1)
    assert "".join(d.text for d in deltas if d) == text
    end = delta_notices(RelayedDelta("a", "t", 5, "", end=True))
    assert [decode_delta(ref) for ref in end] == [RelayedDelta("a", "t", 5, "", end=True)]


def test_a_notice_this_version_cannot_read_is_ignored() -> None:
    assert decode_delta("not json") is None
    assert decode_delta(orjson.dumps({"c": "a", "u": "t", "a": "3", "x": ""}).decode()) is None

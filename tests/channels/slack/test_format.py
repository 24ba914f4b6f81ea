"""Markdown → mrkdwn, chunking on line boundaries, Slack text → plain text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.slack.format import split_text, to_mrkdwn, to_plain_text


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also bold__", "*bold* and *also bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("~~gone~~", "~gone~"),
        ("***both***", "*_both_*"),
        ("[docs](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|docs>"),
        ("![chart](https://example.com/c.png)", "<https://example.com/c.png|chart>"),
        ("# Title", "*Title*"),
        ("### **Bold** title ###", "*Bold title*"),
        ("- one\n* two\n  + nested", "• one\n• two\n  • nested"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("> quoted **text**", "> quoted *text*"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("use `a**b**c` & `<x>`", "use `a**b**c` &amp; `&lt;x&gt;`"),
        ("snake_case_name and 2*3*4", "snake_case_name and 2*3*4"),
        (
            "hi <@U123> and <!here>, see <https://x.io|x>",
            "hi <@U123> and <!here>, see <https://x.io|x>",
        ),
        ("---", "───"),
    ],
)
def test_markdown_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_code_blocks_keep_their_content_and_lose_the_language_tag() -> None:
    markdown = "Run:\n```python\nif a < b and **kw:\n    pass\n```\nDone **now**"
    assert to_mrkdwn(markdown) == "Run:\n```\nif a &lt; b and **kw:\n    pass\n```\nDone *now*"


def test_tables_become_code_blocks() -> None:
    markdown = "| a | b |\n|---|:-:|\n| 1 | 2 |\nafter"
    assert to_mrkdwn(markdown) == "```\n| a | b |\n|---|:-:|\n| 1 | 2 |\n```\nafter"


def test_short_text_is_one_chunk_and_blank_text_none() -> None:
    assert split_text("hello\nworld", 100) == ["hello\nworld"]
    assert split_text(" \n \n", 100) == []


def test_chunks_break_at_lines() -> None:
    text = "\n".join(f"line {i:03d}" for i in range(100))  # 8 characters a line
    chunks = split_text(text, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert "\n".join(chunks).split("\n") == text.split("\n")
    assert all(c.endswith(tuple("0123456789")) for c in chunks)


def test_a_cut_code_block_is_closed_and_reopened() -> None:
    text = "intro\n```\n" + "\n".join(f"code {i:03d}" for i in range(60)) + "\n```\noutro"
    chunks = split_text(text, 120)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 120
        assert chunk.count("```") % 2 == 0  # every chunk renders on its own
    assert chunks[1].startswith("```\ncode")


def test_a_long_line_is_cut_at_spaces_and_never_inside_an_entity() -> None:
    words = " ".join(["word"] * 100)
    chunks = split_text(words, 60)
    assert all(len(c) <= 60 for c in chunks)
    assert " ".join(chunks).split() == words.split()
    dense = "x" * 50 + "&amp;" + "y" * 100
    pieces = split_text(dense, 56)
    assert all("&amp;" in p or "&" not in p for p in pieces)
    assert "".join(pieces) == dense


@given(
    st.lists(
        st.text(alphabet=st.characters(exclude_characters="`\r\n"), max_size=300), max_size=60
    ),
    st.integers(min_value=40, max_value=500),
)
def test_chunks_fit_and_keep_every_word(lines: list[str], limit: int) -> None:
    text = "\n".join(lines)
    chunks = split_text(text, limit)
    assert all(0 < len(c) <= limit for c in chunks)
    assert "".join("".join(chunks).split()) == "".join(text.split())


def test_slack_text_back_to_plain_text() -> None:
    slack = "see <https://a.io/x?y=1&amp;z=2|the docs> or <https://b.io> &lt;ok&gt;"
    assert to_plain_text(slack) == "see the docs (https://a.io/x?y=1&z=2) or https://b.io <ok>"
    assert to_plain_text("<mailto:a@b.io|a@b.io> <http://c.io|c.io>") == "a@b.io c.io"

"""Splitting replies to Discord's 2,000-character limit."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.discord.format import DISCORD_MESSAGE_LIMIT, chunk_message


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def open_fence_at_end(chunk: str) -> str | None:
    """The fence marker still open at the end of ``chunk`` (CommonMark's rule), or None."""
    open_marker: str | None = None
    for line in chunk.split("\n"):
        match = re.match(r"^ {0,3}(`{3,}|~{3,})(.*)$", line)
        if match is None:
            continue
        marker, info = match.groups()
        if open_marker is None:
            open_marker = marker
        elif marker[0] == open_marker[0] and len(marker) >= len(open_marker) and not info.strip():
            open_marker = None
    return open_marker


def test_short_text_is_one_message() -> None:
    assert chunk_message("hello\nworld") == ["hello\nworld"]


def test_empty_and_blank_text_is_no_message() -> None:
    assert chunk_message("") == []
    assert chunk_message(" \n\n ") == []


def test_splits_fall_on_line_boundaries() -> None:
    lines = [f"{i:03d} " + "w" * 95 for i in range(60)]  # 6,000 characters

    chunks = chunk_message("\n".join(lines))

    assert len(chunks) == 3
    assert all(len(chunk) <= DISCORD_MESSAGE_LIMIT for chunk in chunks)
    assert [line for chunk in chunks for line in chunk.split("\n")] == lines


def test_a_code_block_across_a_split_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(40))
    text = f"Intro\n```python\n{code}\n```\nOutro"

    chunks = chunk_message(text, limit=120)

    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 120
        assert open_fence_at_end(chunk) is None
    assert chunks[0].startswith("Intro\n```python\n")
    assert all(chunk.startswith("```python\n") for chunk in chunks[1:])
    assert chunks[-1].endswith("```\nOutro")
    body = [line for chunk in chunks for line in chunk.split("\n") if not line.startswith("```")]
    assert body == ["Intro", *code.split("\n"), "Outro"]


def test_tilde_fences_and_longer_markers_are_respected() -> None:
    inner = "\n".join(["````md", "```", "not a close", *[f"line {i}" for i in range(30)], "````"])

    chunks = chunk_message(inner, limit=100)

    assert all(chunk.startswith("````md") for chunk in chunks)
    assert all(chunk.endswith("````") for chunk in chunks)


def test_an_over_long_line_is_cut_at_a_space_when_it_can_be() -> None:
    words = " ".join(["word"] * 1000)  # 4,999 characters on one line

    chunks = chunk_message(words)

    assert all(len(chunk) <= DISCORD_MESSAGE_LIMIT for chunk in chunks)
    assert all(not chunk.startswith("ord") for chunk in chunks)
    assert "".join(chunks) == words


def test_an_over_long_line_without_spaces_is_hard_cut() -> None:
    chunks = chunk_message("x" * 4500)

    assert [len(chunk) for chunk in chunks] == [2000, 2000, 500]


def test_astral_characters_count_twice() -> None:
    chunks = chunk_message("😀" * 1500)

    assert [utf16_units(chunk) for chunk in chunks] == [2000, 1000]


def test_a_tiny_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        chunk_message("text", limit=10)


texts = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=300),
        st.sampled_from(["```", "```py", "~~~", "````", "", " "]),
    ),
    max_size=60,
).map("\n".join)


@given(texts, st.integers(min_value=40, max_value=400))
def test_every_chunk_fits_and_keeps_its_fences_balanced(text: str, limit: int) -> None:
    for chunk in chunk_message(text, limit=limit):
        assert 0 < utf16_units(chunk) <= limit
        assert chunk.strip()
        assert open_fence_at_end(chunk) is None


@given(
    st.lists(
        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="`~\n"), max_size=500),
        max_size=30,
    ).map("\n".join),
    st.integers(min_value=40, max_value=400),
)
def test_without_fences_no_text_is_lost_or_added(text: str, limit: int) -> None:
    chunks = chunk_message(text, limit=limit)

    assert re.sub(r"\s", "", "".join(chunks)) == re.sub(r"\s", "", text)

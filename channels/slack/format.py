"""Markdown to Slack mrkdwn, chunking on line boundaries, and Slack text back to plain text.

Models write CommonMark-ish Markdown; Slack renders its own mrkdwn: ``*bold*``, ``_italic_``,
``~strike~``, ``<url|label>``, no headings, and ``&``, ``<``, ``>`` escaped as entities.
Code spans and fenced blocks keep their content (escaped only), Slack's own tokens
(``<@U123>``, ``<!here>``, ``<https://…|…>``) pass through untouched.
"""

from __future__ import annotations

import re

from channels.slack.constants import CHUNK_LIMIT

_FENCE = "```"
# Room kept in every chunk to close a code fence the split cut through ("\n```").
_FENCE_RESERVE = len(_FENCE) + 1

# Tokens that must come out unchanged apart from escaping: code spans, Markdown links,
# Slack's own <…> tokens. Matched first and swapped for placeholders.
_PROTECTED = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_body>.+?)(?P=ticks))"
    r"|(?P<link>!?\[(?P<label>[^\]\n]+)\]\((?P<url>[^)\s]+)(?:\s+\"[^\"]*\")?\))"
    r"|(?P<slack><(?:[@#!][^<>\s]*|(?:https?|mailto):[^<>\s|]+(?:\|[^<>\n]*)?)>)"
)
_PLACEHOLDER = re.compile("\x02(\\d+)\x03")
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE = re.compile(r"^(\s*)>\s?(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_BOLD_MARK = "\x01"

# Slack text → plain text for the agent.
_SLACK_LINK = re.compile(r"<((?:https?|mailto):[^<>|]+)(?:\|([^<>]*))?>")


def escape(text: str) -> str:
    """Escape the three characters Slack reserves for its own markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Undo :func:`escape` (the order matters: ``&amp;lt;`` stays ``&lt;``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def to_mrkdwn(markdown: str) -> str:
    """Convert Markdown to Slack mrkdwn, line by line; fenced code is only escaped.

    Tables have no Slack form, so a Markdown table is put in a code block where its columns
    at least line up.
    """
    out: list[str] = []
    lines = markdown.replace("\r\n", "\n").split("\n")
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(_FENCE):
            # Slack shows a language tag as the first code line: drop it.
            in_fence = not in_fence
            out.append(line[: len(line) - len(line.lstrip())] + _FENCE)
        elif in_fence:
            out.append(escape(line))
        elif _starts_table(lines, i):
            start = i
            while i < len(lines) and _TABLE_ROW.match(lines[i]):
                i += 1
            out.append(_FENCE)
            out.extend(escape(row) for row in lines[start:i])
            out.append(_FENCE)
            continue
        else:
            out.append(_convert_line(line))
        i += 1
    return "\n".join(out)


def _starts_table(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and _TABLE_ROW.match(lines[i]) is not None
        and _TABLE_RULE.match(lines[i + 1]) is not None
    )


def _convert_line(line: str) -> str:
    if _RULE.match(line):
        return "───"
    if heading := _HEADING.match(line):
        title = _BOLD.sub(r"\2", heading.group(1))
        return f"*{_convert_inline(title)}*" if title else ""
    if quote := _QUOTE.match(line):
        return f"{quote.group(1)}> {_convert_line(quote.group(2))}".rstrip()
    if bullet := _BULLET.match(line):
        return f"{bullet.group(1)}• {_convert_inline(bullet.group(2))}"
    return _convert_inline(line)


def _convert_inline(text: str) -> str:
    saved: list[str] = []

    def protect(match: re.Match[str]) -> str:
        if match.group("code") is not None:
            token = match.group("ticks")[:1] + escape(match.group("code_body")) + "`"
        elif match.group("link") is not None:
            label = escape(match.group("label")).replace("|", "¦")
            token = f"<{escape(match.group('url'))}|{label}>"
        else:
            token = match.group("slack")
        saved.append(token)
        return f"\x02{len(saved) - 1}\x03"

    text = escape(_PROTECTED.sub(protect, text))
    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD_MARK}_{m.group(1)}_{_BOLD_MARK}", text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = text.replace(_BOLD_MARK, "*")
    return _PLACEHOLDER.sub(lambda m: saved[int(m.group(1))], text)


def split_text(text: str, limit: int = CHUNK_LIMIT) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters, on line boundaries.

    A line longer than a chunk is cut at its last space in reach (else hard, but never
    inside an ``&amp;`` entity or a ``<…>`` token). A code fence cut by a chunk boundary is
    closed at the end of the chunk and reopened at the start of the next one, so every
    chunk renders on its own. Blank chunks are dropped.
    """
    if limit <= 4 * _FENCE_RESERVE:
        raise ValueError(f"chunk limit {limit} is too small")
    text = text.strip("\n")
    if len(text) <= limit:
        return [text] if text.strip() else []
    budget = limit - _FENCE_RESERVE
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    in_fence = False

    def flush() -> None:
        nonlocal current, size
        body = "\n".join(current)
        if in_fence:
            body += "\n" + _FENCE
        if body.strip() and body.strip() != _FENCE + "\n" + _FENCE:
            chunks.append(body.strip("\n"))
        current = [_FENCE] if in_fence else []
        size = len(_FENCE) if in_fence else 0

    for line in text.split("\n"):
        for piece in _cut_line(line, budget - _FENCE_RESERVE):
            added = len(piece) + (1 if current else 0)
            if current and size + added > budget:
                flush()
                added = len(piece) + (1 if current else 0)
            current.append(piece)
            size += added
            if piece.lstrip().startswith(_FENCE):
                in_fence = not in_fence
    if current and current != [_FENCE]:
        flush()
    return chunks


def _cut_line(line: str, width: int) -> list[str]:
    pieces: list[str] = []
    while len(line) > width:
        cut = line.rfind(" ", width // 2, width + 1)
        if cut <= 0:
            cut = _safe_cut(line, width)
        pieces.append(line[:cut].rstrip())
        line = line[cut:].lstrip(" ")
    pieces.append(line)
    return pieces


def _safe_cut(line: str, width: int) -> int:
    """A cut position ≤ width that does not split an entity or a ``<…>`` token."""
    head = line[:width]
    for opener, closer in (("&", ";"), ("<", ">")):
        start = head.rfind(opener)
        if start > 0 and head.find(closer, start) == -1:
            return start
    return width


def to_plain_text(text: str) -> str:
    """Turn Slack message text into what a person typed: links unwrapped, entities decoded."""

    def link(match: re.Match[str]) -> str:
        url, label = match.group(1), match.group(2)
        if not label:
            return url
        if url.endswith(label):  # Slack linkified what the person typed: keep their text
            return label
        return f"{label} ({url})"

    return unescape(_SLACK_LINK.sub(link, text))

"""What the model reads of an MCP server's answer, and the names its tools go by.

Text content is kept in order; ``structuredContent`` stands in as JSON text when there is no
text; images, audio and resources become one-line notes (``[image/png, 12,345 bytes]``), since
no provider here takes them inside a tool result.

The text is cut to ``agent.tools.maxResultChars`` here, as the result arrives, so that the
transcript and the model get the same cut and neither holds what was cut
(:func:`bounded_text`); a stdio server's longest strings were cut before, while they were
read (:mod:`gateway.mcp.lines`), and the note counts what that dropped too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Final

import orjson
from mcp import types

from gateway.mcp.lines import reader_cuts, uncut_length
from gateway.schema.mcp import TOOL_SEPARATOR

#: Provider tool names: OpenAI and Anthropic take at most 64 of these characters.
MAX_TOOL_NAME: Final = 64
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS: Final = 6


def tool_name(server: str, tool: str) -> str:
    """``<server>__<tool>`` as a provider accepts it: characters outside ``[A-Za-z0-9_-]``
    become ``_``; a name past 64 characters is cut and ends in 6 hex characters of the
    whole name's hash, so two long names that share a start stay apart."""
    name = _UNSAFE.sub("_", f"{server}{TOOL_SEPARATOR}{tool}")
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[: MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest}"


def result_text(result: types.CallToolResult) -> str:
    """The text the model gets for ``result`` (see the module doc)."""
    texts: list[str] = []
    notes: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        else:
            notes.append(content_note(block))
    if not texts and result.structured_content is not None:
        texts.append(orjson.dumps(result.structured_content).decode())
    parts = [*texts, *notes] if texts else notes
    return "\n".join(parts) if parts else "(no content)"


def bounded_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, its end replaced by a note when it is longer:
    ``[cut: 41,943,040 chars, showing the first 19,950]`` (the length before any cut, what
    the reader dropped counted in bytes)."""
    if len(text) <= limit:
        return text
    total = uncut_length(text)
    note = "\n[cut: {total:,} chars, showing the first {shown:,}]"
    shown = max(0, limit - len(note.format(total=total, shown=limit)))
    return text[:shown] + note.format(total=total, shown=shown)


def content_note(block: object) -> str:
    """One line standing for a non-text content block."""
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.mime_type}, {_decoded_size(block.data):,} bytes]"
    if isinstance(block, types.EmbeddedResource):
        inner = block.resource
        mime = inner.mime_type or "unknown type"
        if isinstance(inner, types.TextResourceContents):
            return f"[resource {inner.uri}, {mime}, {len(inner.text.encode()):,} bytes]"
        return f"[resource {inner.uri}, {mime}, {_decoded_size(inner.blob):,} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def _decoded_size(data: str) -> int:
    if cuts := reader_cuts(data):  # cut while read: base64's 4 characters are 3 bytes
        return sum(total for total, _kept in cuts) * 3 // 4
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)

"""File tools confined to the agent's workspace: ``read``, ``write``, ``edit``, ``ls``.

Paths are relative to the workspace (absolute paths only when they start with it) and are
opened below the workspace's descriptor without following a symlink anywhere on them, so a
sandboxed command that swaps folders for symlinks cannot lead a tool out; see
:mod:`gateway.tools._paths` for the confinement rules. Every filesystem call runs in a
worker thread so big files never block the event loop.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any, Final, TypeVar

from pydantic import Field

from gateway.tools._paths import (
    atomic_write,
    folder,
    locate,
    open_regular,
    open_regular_at,
    os_error,
)
from gateway.tools.base import Tool, ToolContext, ToolOutput, ToolParams
from gateway.tools.errors import ToolError

#: One read result stays well inside a model's context window.
READ_MAX_BYTES: Final = 256 * 1024
READ_DEFAULT_LINES: Final = 2000
#: A NUL byte in the first 8 KiB marks a binary file (git's heuristic).
BINARY_SNIFF_BYTES: Final = 8192
#: edit holds the file in memory twice (old and new text).
EDIT_MAX_BYTES: Final = 4 * 1024 * 1024
LS_MAX_ENTRIES: Final = 1000

WorkspacePath = Annotated[str, Field(min_length=1, description="Path relative to the workspace.")]


class ReadParams(ToolParams):
    path: WorkspacePath
    offset: int = Field(1, ge=1, description="First line to return (1-based).")
    limit: int = Field(READ_DEFAULT_LINES, ge=1, description="Maximum number of lines to return.")


class WriteParams(ToolParams):
    path: WorkspacePath
    content: str = Field(description="The whole new content of the file (UTF-8).")


class EditParams(ToolParams):
    path: WorkspacePath
    old_text: str = Field(min_length=1, description="Exact text to replace.")
    new_text: str = Field(description="Replacement text.")
    replace_all: bool = Field(
        False, description="Replace every occurrence; otherwise oldText must occur once."
    )


class LsParams(ToolParams):
    path: str = Field(".", min_length=1, description="Directory relative to the workspace.")


class ReadTool(Tool[ReadParams]):
    name = "read"
    group = "fs"
    params = ReadParams
    description = (
        "Read a UTF-8 text file from your workspace. Returns up to `limit` lines starting at "
        "line `offset`; long files are returned in parts, with a note saying how to continue."
    )

    async def run(self, params: ReadParams, ctx: ToolContext) -> ToolOutput:
        return await _in_thread(_read, ctx.workspace, params)


class WriteTool(Tool[WriteParams]):
    name = "write"
    group = "fs"
    params = WriteParams
    description = (
        "Write a file in your workspace, replacing it if it exists and creating missing "
        "parent folders. The write is atomic."
    )

    async def run(self, params: WriteParams, ctx: ToolContext) -> ToolOutput:
        return await _in_thread(_write, ctx.workspace, params)


class EditTool(Tool[EditParams]):
    name = "edit"
    group = "fs"
    params = EditParams
    description = (
        "Edit a text file in your workspace by exact replacement: oldText must occur exactly "
        "once (include surrounding lines to make it unique) unless replaceAll is true."
    )

    async def run(self, params: EditParams, ctx: ToolContext) -> ToolOutput:
        return await _in_thread(_edit, ctx.workspace, params)


class LsTool(Tool[LsParams]):
    name = "ls"
    group = "fs"
    params = LsParams
    description = (
        "List a folder of your workspace: folders end in '/', symlinks in '@', files show "
        "their size."
    )

    async def run(self, params: LsParams, ctx: ToolContext) -> ToolOutput:
        return await _in_thread(_ls, ctx.workspace, params)


P = TypeVar("P", ReadParams, WriteParams, EditParams, LsParams)


async def _in_thread(fn: Callable[[Path, P], ToolOutput], workspace: Path, params: P) -> ToolOutput:
    """Run ``fn`` in a worker thread; an OSError it did not expect names the model's path only.

    (``str(OSError)`` would carry the absolute host path.)
    """
    try:
        return await asyncio.to_thread(fn, workspace, params)
    except OSError as exc:
        raise os_error(params.path, exc) from None


def _read(workspace: Path, params: ReadParams) -> ToolOutput:
    path = locate(workspace, params.path)
    shown = path.shown
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if b"\x00" in f.read(BINARY_SNIFF_BYTES):
            raise ToolError(f"{shown} looks like a binary file; read handles text only")
        f.seek(0)
        lines: list[str] = []
        used = 0
        line_no = 0
        cut_lines: list[int] = []
        more = False
        for line_no, (raw, cut) in enumerate(_lines(f, READ_MAX_BYTES), start=1):
            if line_no < params.offset:
                continue
            if len(lines) >= params.limit or (lines and used + len(raw) > READ_MAX_BYTES):
                more = True
                break
            lines.append(raw.decode("utf-8", errors="replace"))
            used += len(raw)
            if cut:
                cut_lines.append(line_no)
    if params.offset > 1 and not lines:
        raise ToolError(f"{shown} has {line_no} lines; offset {params.offset} is past the end")
    text = "".join(lines)
    if not text:
        return ToolOutput(
            content=f"[{shown} is empty]",
            data={"path": shown, "content": "", "startLine": 1, "endLine": 0, "truncated": False},
        )
    end = params.offset + len(lines) - 1
    notes = [f"[line {n} was cut at {READ_MAX_BYTES} bytes]" for n in cut_lines]
    if more:
        notes.append(
            f"[showing lines {params.offset}-{end}; more follows: read with offset={end + 1}]"
        )
    content = text if not notes else text.rstrip("\n") + "\n" + "\n".join(notes)
    data: dict[str, Any] = {
        "path": shown,
        "content": text,
        "startLine": params.offset,
        "endLine": end,
        "truncated": more or bool(cut_lines),
    }
    return ToolOutput(content=content, data=data)


def _lines(f: IO[bytes], max_line: int) -> Iterator[tuple[bytes, bool]]:
    """Lines of ``f`` with their newline, each cut to ``max_line`` bytes: memory stays bounded."""
    while piece := f.readline(max_line):
        if piece.endswith(b"\n") or len(piece) < max_line:
            yield piece, False
            continue
        cut = False
        while rest := f.readline(max_line):
            cut = cut or rest != b"\n"
            if rest.endswith(b"\n"):
                break
        yield piece, cut


def _write(workspace: Path, params: WriteParams) -> ToolOutput:
    path = locate(workspace, params.path)
    shown = path.shown
    data = params.content.encode("utf-8")
    try:
        with folder(path.root, path.parent, create=True) as dir_fd:
            atomic_write(dir_fd, path.name, data, shown)
    except OSError as exc:
        raise os_error(shown, exc) from None
    return ToolOutput(
        content=f"wrote {len(data)} bytes to {shown}", data={"path": shown, "bytes": len(data)}
    )


def _edit(workspace: Path, params: EditParams) -> ToolOutput:
    path = locate(workspace, params.path)
    shown = path.shown
    if params.old_text == params.new_text:
        raise ToolError("oldText and newText are the same; nothing to change")
    try:
        with folder(path.root, path.parent) as dir_fd:
            return _edit_in(dir_fd, path.name, shown, params)
    except OSError as exc:
        raise os_error(shown, exc) from None


def _edit_in(dir_fd: int, name: str, shown: str, params: EditParams) -> ToolOutput:
    """The edit, read and written in the one folder ``dir_fd`` (what a swap cannot move)."""
    fd = open_regular_at(dir_fd, name, shown)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(EDIT_MAX_BYTES + 1)
    if len(raw) > EDIT_MAX_BYTES:
        raise ToolError(f"{shown} is larger than {EDIT_MAX_BYTES} bytes; edit it with write")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not UTF-8 text") from None
    count = text.count(params.old_text)
    if count == 0:
        raise ToolError(
            f"oldText was not found in {shown}; it must match exactly, whitespace included"
        )
    if count > 1 and not params.replace_all:
        raise ToolError(
            f"oldText occurs {count} times in {shown}; include more surrounding text to make "
            "it unique, or set replaceAll"
        )
    new = text.replace(params.old_text, params.new_text, -1 if params.replace_all else 1)
    atomic_write(dir_fd, name, new.encode("utf-8"), shown)
    replaced = count if params.replace_all else 1
    return ToolOutput(
        content=f"replaced {replaced} occurrence{'s' if replaced != 1 else ''} in {shown}",
        data={"path": shown, "replacements": replaced},
    )


def _ls(workspace: Path, params: LsParams) -> ToolOutput:
    path = locate(workspace, params.path)
    shown = path.shown
    try:
        with folder(path.root, path.parts) as dir_fd:
            names = sorted(os.listdir(dir_fd))
            entries = [_entry(dir_fd, name) for name in names[:LS_MAX_ENTRIES]]
    except NotADirectoryError:
        raise ToolError(f"{shown} is not a directory") from None
    except OSError as exc:
        raise os_error(shown, exc) from None
    lines: list[str] = []
    for entry in entries:
        name = entry["name"]
        if entry["type"] == "dir":
            lines.append(f"{name}/")
        elif entry["type"] == "symlink":
            lines.append(f"{name}@")
        elif entry["type"] == "file":
            lines.append(f"{name}  ({entry['size']} bytes)")
        else:
            lines.append(name)
    truncated = len(names) > LS_MAX_ENTRIES
    if truncated:
        lines.append(f"[{len(names) - LS_MAX_ENTRIES} more entries not shown]")
    content = "\n".join(lines) if lines else f"{shown} is empty"
    return ToolOutput(
        content=content, data={"path": shown, "entries": entries, "truncated": truncated}
    )


def _entry(dir_fd: int, name: str) -> dict[str, Any]:
    # Relative to the folder's descriptor, not followed: a symlink is reported as itself
    # (it may point outside).
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return {"name": name, "type": "other"}
    if stat.S_ISLNK(st.st_mode):
        return {"name": name, "type": "symlink"}
    if stat.S_ISDIR(st.st_mode):
        return {"name": name, "type": "dir"}
    if stat.S_ISREG(st.st_mode):
        return {"name": name, "type": "file", "size": st.st_size}
    return {"name": name, "type": "other"}

"""read, write, edit, ls: behaviour, limits, and confinement to the workspace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.llm import ToolCall
from gateway.tools import ToolRegistry, _beneath
from gateway.tools.fs import EDIT_MAX_BYTES, READ_MAX_BYTES
from tests.gateway.tools.conftest import CallTool, MakeCtx


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def ws(workspace: Path) -> Path:
    workspace.mkdir(mode=0o700)
    return workspace


# --- read -------------------------------------------------------------------------------


async def test_read_returns_text(ws: Path, call_tool: CallTool) -> None:
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    out = await call_tool("read", path="a.txt")
    assert not out.is_error
    assert out.content == "one\ntwo\nthree\n"
    assert out.data == {
        "path": "a.txt",
        "content": "one\ntwo\nthree\n",
        "startLine": 1,
        "endLine": 3,
        "truncated": False,
    }


async def test_read_offset_and_limit_say_how_to_continue(ws: Path, call_tool: CallTool) -> None:
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await call_tool("read", path="a.txt", offset=3, limit=2)
    assert out.content.startswith("line 3\nline 4\n")
    assert "read with offset=5" in out.content
    assert out.data is not None
    assert (out.data["startLine"], out.data["endLine"], out.data["truncated"]) == (3, 4, True)


async def test_read_empty_file(ws: Path, call_tool: CallTool) -> None:
    (ws / "e.txt").write_text("")
    out = await call_tool("read", path="e.txt")
    assert out.content == "[e.txt is empty]"
    assert out.data is not None
    assert out.data["content"] == ""


async def test_read_line_of_exactly_the_cap_is_not_cut(ws: Path, call_tool: CallTool) -> None:
    (ws / "l.txt").write_text("z" * READ_MAX_BYTES + "\nnext\n")
    out = await call_tool("read", path="l.txt", limit=1)
    assert "was cut" not in out.content
    assert "read with offset=2" in out.content


async def test_read_offset_past_end_is_an_error(ws: Path, call_tool: CallTool) -> None:
    (ws / "a.txt").write_text("x\ny\n")
    out = await call_tool("read", path="a.txt", offset=5)
    assert out.is_error
    assert "has 2 lines" in out.content


async def test_read_caps_bytes(ws: Path, call_tool: CallTool) -> None:
    line = "x" * 999 + "\n"
    (ws / "big.txt").write_text(line * (READ_MAX_BYTES // 1000 * 2))
    out = await call_tool("read", path="big.txt")
    assert out.data is not None
    assert out.data["truncated"] is True
    assert len(out.data["content"]) <= READ_MAX_BYTES
    assert f"offset={out.data['endLine'] + 1}" in out.content


async def test_read_cuts_a_line_longer_than_the_cap(ws: Path, call_tool: CallTool) -> None:
    (ws / "long.txt").write_text("y" * (READ_MAX_BYTES + 10) + "\nnext\n")
    out = await call_tool("read", path="long.txt")
    assert out.data is not None
    assert len(out.data["content"]) == READ_MAX_BYTES
    assert "[line 1 was cut" in out.content


async def test_read_refuses_binary_directories_and_fifos(ws: Path, call_tool: CallTool) -> None:
    (ws / "bin").write_bytes(b"\x7fELF\x00\x01")
    (ws / "dir").mkdir()
    os.mkfifo(ws / "fifo")
    assert "binary" in (await call_tool("read", path="bin")).content
    assert "is a directory" in (await call_tool("read", path="dir")).content
    fifo = await call_tool("read", path="fifo")
    assert fifo.is_error
    assert "not a regular file" in fifo.content


async def test_read_missing_file(ws: Path, call_tool: CallTool) -> None:
    out = await call_tool("read", path="nope.txt")
    assert out.is_error
    assert "nope.txt: no such file" in out.content


async def test_read_decodes_invalid_utf8_with_replacement(ws: Path, call_tool: CallTool) -> None:
    (ws / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    out = await call_tool("read", path="latin.txt")
    assert out.content == "caf\ufffd\n"


# --- write ------------------------------------------------------------------------------


async def test_write_creates_workspace_and_parents(workspace: Path, call_tool: CallTool) -> None:
    assert not names(workspace.parent)
    out = await call_tool("write", path="deep/er/f.txt", content="héllo")
    assert not out.is_error
    assert out.data == {"path": "deep/er/f.txt", "bytes": 6}
    assert (workspace / "deep/er/f.txt").read_text() == "héllo"
    assert mode(workspace) == 0o700


async def test_directories_made_for_a_workspace_are_private_too(
    tmp_path: Path, make_ctx: MakeCtx, registry: ToolRegistry
) -> None:
    """``<stateDir>/workspaces/<agent>``: the ``workspaces`` folder made on the way is 0700,
    whatever the umask would give it."""
    workspace = tmp_path / "state" / "workspaces" / "main"
    old = os.umask(0o022)
    try:
        call = ToolCall("c", "ls", {})
        out = await registry.invoke(call, make_ctx(workspace=workspace), registry.names())
    finally:
        os.umask(old)
    assert not out.is_error
    for directory in (workspace, workspace.parent, workspace.parent.parent):
        assert mode(directory) == 0o700, directory


async def test_write_replaces_atomically_and_keeps_mode(ws: Path, call_tool: CallTool) -> None:
    target = ws / "f.sh"
    target.write_text("old")
    target.chmod(0o750)
    out = await call_tool("write", path="f.sh", content="new")
    assert not out.is_error
    assert target.read_text() == "new"
    assert mode(target) == 0o750
    assert names(ws) == ["f.sh"]  # no temp file left behind


async def test_write_refuses_a_directory(ws: Path, call_tool: CallTool) -> None:
    (ws / "d").mkdir()
    out = await call_tool("write", path="d", content="x")
    assert out.is_error
    assert "is a directory" in out.content


async def test_write_under_a_file_is_a_clean_error(ws: Path, call_tool: CallTool) -> None:
    (ws / "f").write_text("x")
    out = await call_tool("write", path="f/g.txt", content="x")
    assert out.is_error
    assert out.content.startswith("write: f/g.txt: ")


# --- edit -------------------------------------------------------------------------------


async def test_edit_replaces_exactly_once(ws: Path, call_tool: CallTool) -> None:
    (ws / "c.py").write_text("a = 1\nb = 2\n")
    out = await call_tool("edit", path="c.py", oldText="b = 2", newText="b = 3")
    assert not out.is_error
    assert out.data == {"path": "c.py", "replacements": 1}
    assert (ws / "c.py").read_text() == "a = 1\nb = 3\n"


async def test_edit_ambiguous_match_needs_replace_all(ws: Path, call_tool: CallTool) -> None:
    (ws / "c.txt").write_text("x x x")
    out = await call_tool("edit", path="c.txt", oldText="x", newText="y")
    assert out.is_error
    assert "occurs 3 times" in out.content
    assert (ws / "c.txt").read_text() == "x x x"
    out = await call_tool("edit", path="c.txt", oldText="x", newText="y", replaceAll=True)
    assert out.content == "replaced 3 occurrences in c.txt"
    assert (ws / "c.txt").read_text() == "y y y"


async def test_edit_errors(ws: Path, call_tool: CallTool) -> None:
    (ws / "c.txt").write_text("abc")
    (ws / "bad.txt").write_bytes(b"\xff\xfe")
    (ws / "huge.txt").write_bytes(b"a" * (EDIT_MAX_BYTES + 1))
    missing = await call_tool("edit", path="c.txt", oldText="zzz", newText="y")
    assert "was not found" in missing.content
    same = await call_tool("edit", path="c.txt", oldText="a", newText="a")
    assert "the same" in same.content
    empty = await call_tool("edit", path="c.txt", oldText="", newText="y")
    assert "args.oldText" in empty.content
    assert (
        "not UTF-8" in (await call_tool("edit", path="bad.txt", oldText="a", newText="b")).content
    )
    assert (
        "larger than"
        in (await call_tool("edit", path="huge.txt", oldText="a", newText="b")).content
    )
    for out in (missing, same, empty):
        assert out.is_error
    assert (ws / "c.txt").read_text() == "abc"


# --- ls ---------------------------------------------------------------------------------


async def test_ls_lists_entries_without_following_symlinks(ws: Path, call_tool: CallTool) -> None:
    (ws / "sub").mkdir()
    (ws / "f.txt").write_text("12345")
    (ws / "out").symlink_to("/etc")
    out = await call_tool("ls")
    assert out.content == "f.txt  (5 bytes)\nout@\nsub/"
    assert out.data is not None
    assert out.data["entries"] == [
        {"name": "f.txt", "type": "file", "size": 5},
        {"name": "out", "type": "symlink"},
        {"name": "sub", "type": "dir"},
    ]


async def test_ls_empty_and_not_a_directory(ws: Path, call_tool: CallTool) -> None:
    assert (await call_tool("ls")).content == ". is empty"
    (ws / "f").write_text("")
    out = await call_tool("ls", path="f")
    assert out.is_error
    assert "not a directory" in out.content


# --- confinement ------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace with a secret in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("TOP SECRET")
    return folder


HOSTILE = [
    "../outside/secret.txt",
    "a/../../outside/secret.txt",
    "..",
    "/etc/passwd",
    "etclink/passwd",
    "filelink",
    "dirlink/secret.txt",
    "dirlink/new.txt",
    "dangling",
    "nul\x00byte",
]


@pytest.fixture
def hostile_ws(ws: Path, outside: Path) -> Path:
    (ws / "etclink").symlink_to("/etc")
    (ws / "filelink").symlink_to(outside / "secret.txt")
    (ws / "dirlink").symlink_to(outside)
    (ws / "dangling").symlink_to(outside / "created-by-agent.txt")
    return ws


@pytest.mark.parametrize("path", HOSTILE)
@pytest.mark.parametrize("tool", ["read", "write", "edit", "ls"])
async def test_paths_outside_the_workspace_are_refused(
    hostile_ws: Path, outside: Path, call_tool: CallTool, tool: str, path: str
) -> None:
    args = {
        "read": {},
        "write": {"content": "pwned"},
        "edit": {"oldText": "TOP", "newText": "pwned"},
        "ls": {},
    }[tool]
    out = await call_tool(tool, path=path, **args)
    assert out.is_error
    assert (
        "outside the workspace" in out.content
        or "not allowed" in out.content
        or ("NUL" in out.content)
    )
    assert "TOP SECRET" not in out.content
    assert "root:" not in out.content
    assert names(outside) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "TOP SECRET"


@pytest.fixture(params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each confinement test both ways: the kernel's openat2 where it has it, and the
    per-component walk used where it does not (forced by forgetting openat2)."""
    if request.param == "walk":
        monkeypatch.setattr(_beneath, "_openat2", None)
    elif not _beneath.openat2_in_use():
        pytest.fail("this kernel has no openat2 (Linux 5.6+); the walk is tested on its own")
    return str(request.param)


#: A symlink first, in the middle and last on the path; each points inside the workspace.
THROUGH_LINKS = ["alias/f.txt", "real/inner-alias/f.txt", "real/file-alias", "real/inner-alias"]


@pytest.mark.parametrize("path", THROUGH_LINKS)
@pytest.mark.parametrize("tool", ["read", "write", "edit", "ls"])
async def test_a_symlink_anywhere_on_the_path_is_refused_even_inside(
    ws: Path, call_tool: CallTool, opener: str, tool: str, path: str
) -> None:
    """Not followed, wherever it points: a sandboxed command could swap its target."""
    (ws / "real/inner").mkdir(parents=True)
    (ws / "real/f.txt").write_text("inside")
    (ws / "real/inner/f.txt").write_text("inside")
    (ws / "alias").symlink_to(ws / "real")
    (ws / "real/inner-alias").symlink_to("inner")
    (ws / "real/file-alias").symlink_to("f.txt")
    before = _snapshot(ws)
    args = {"write": {"content": "new"}, "edit": {"oldText": "inside", "newText": "new"}}
    out = await call_tool(tool, path=path, **args.get(tool, {}))
    assert out.is_error
    assert out.content == (
        f"{tool}: {path}: symlinks are not allowed in a path; the file tools do not follow them"
    )
    assert _snapshot(ws) == before


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's content, a symlink's target, ``/`` for a folder."""
    found: dict[str, str] = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[rel] = "/"
        else:
            found[rel] = path.read_text()
    return found


@pytest.mark.parametrize("tool", ["read", "write", "edit", "ls"])
async def test_a_dangling_symlink_is_refused_and_nothing_is_made(
    ws: Path, call_tool: CallTool, opener: str, tool: str
) -> None:
    (ws / "dangling").symlink_to("made-by-the-tool.txt")
    (ws / "dangling-dir").symlink_to("no-such-folder")
    args = {"write": {"content": "new"}, "edit": {"oldText": "a", "newText": "b"}}
    for path in ("dangling", "dangling-dir/new.txt"):
        out = await call_tool(tool, path=path, **args.get(tool, {}))
        assert out.is_error
        assert "symlinks are not allowed" in out.content
    assert names(ws) == ["dangling", "dangling-dir"]


async def test_a_write_replaces_the_entry_never_writes_through(
    ws: Path, call_tool: CallTool, opener: str
) -> None:
    """A hard link's other name keeps the old content: the write made a new file."""
    (ws / "a.txt").write_text("old")
    os.link(ws / "a.txt", ws / "b.txt")
    assert not (await call_tool("write", path="b.txt", content="new")).is_error
    assert not (await call_tool("edit", path="a.txt", oldText="old", newText="edited")).is_error
    assert (ws / "b.txt").read_text() == "new"
    assert (ws / "a.txt").read_text() == "edited"
    assert (ws / "a.txt").stat().st_ino != (ws / "b.txt").stat().st_ino
    assert names(ws) == ["a.txt", "b.txt"]


async def test_modes_are_kept_and_new_files_follow_the_umask(
    ws: Path, call_tool: CallTool, opener: str
) -> None:
    (ws / "run.sh").write_text("echo 1")
    (ws / "run.sh").chmod(0o4751)
    (ws / "secret.txt").write_text("s")
    (ws / "secret.txt").chmod(0o600)
    old = os.umask(0o027)
    try:
        assert not (await call_tool("edit", path="run.sh", oldText="1", newText="2")).is_error
        assert not (await call_tool("write", path="secret.txt", content="t")).is_error
        assert not (await call_tool("write", path="sub/new.txt", content="n")).is_error
    finally:
        os.umask(old)
    assert (ws / "run.sh").read_text() == "echo 2"
    assert mode(ws / "run.sh") == 0o4751
    assert mode(ws / "secret.txt") == 0o600
    assert mode(ws / "sub/new.txt") == 0o640
    assert mode(ws / "sub") == 0o750


async def test_an_absolute_path_is_taken_by_name_not_resolved(
    tmp_path: Path, ws: Path, make_ctx: MakeCtx, registry: ToolRegistry, opener: str
) -> None:
    """Through the workspace's configured name (a symlink to it) an absolute path is
    accepted; through any other symlink to it, it is outside."""
    (ws / "f.txt").write_text("ok")
    configured = tmp_path / "configured"
    configured.symlink_to(ws)
    other = tmp_path / "other"
    other.symlink_to(ws)
    ctx = make_ctx(workspace=configured)
    for path, expected in [
        (f"{configured}/f.txt", "ok"),
        (f"{ws}/f.txt", "ok"),
        (f"{other}/f.txt", f"read: '{other}/f.txt' is outside the workspace"),
    ]:
        out = await registry.invoke(ToolCall("c", "read", {"path": path}), ctx, frozenset({"read"}))
        assert out.content == expected


async def test_absolute_path_inside_the_workspace_is_accepted(
    ws: Path, call_tool: CallTool
) -> None:
    (ws / "f.txt").write_text("ok")
    out = await call_tool("read", path=str(ws / "f.txt"))
    assert out.content == "ok"
    assert out.data is not None
    assert out.data["path"] == "f.txt"


async def test_very_long_names_are_clean_errors(ws: Path, call_tool: CallTool) -> None:
    long_name = "n" * 300
    for tool, args in [("write", {"content": "x"}), ("read", {}), ("ls", {})]:
        out = await call_tool(tool, path=long_name, **args)
        assert out.is_error
        assert out.content.startswith(f"{tool}: ")
        assert str(ws) not in out.content  # host paths never shown


async def test_unicode_names_round_trip(ws: Path, call_tool: CallTool) -> None:
    name = "données/日本語 ✓.txt"
    assert not (await call_tool("write", path=name, content="ü")).is_error
    assert (await call_tool("read", path=name)).content == "ü"
    listing = await call_tool("ls", path="données")
    assert "日本語 ✓.txt" in listing.content


async def test_symlink_loop_is_a_clean_error(ws: Path, call_tool: CallTool) -> None:
    (ws / "loop").symlink_to(ws / "loop")
    out = await call_tool("read", path="loop")
    assert out.is_error

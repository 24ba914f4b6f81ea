"""The workspace's measurement on a real file system: what it counts, what it never follows,
where it stops, and that hostile trees (written by a sandboxed command) neither crash it nor
hide from it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.tools._disk_usage import measure, open_folder

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workspace beside a folder outside it holding 4 MiB."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "host.bin").write_bytes(b"h" * 4 * MIB)
    return tmp_path / "ws"


def test_it_counts_what_files_hold_on_disk(tree: Path) -> None:
    empty = measure(tree)
    assert empty.unmeasured is None
    (tree / "deep" / "er").mkdir(parents=True)
    (tree / "deep" / "er" / "data.bin").write_bytes(b"d" * 3 * MIB)
    with (tree / "sparse.bin").open("wb") as sparse:
        sparse.truncate(1024 * MIB)  # a gigabyte long, nothing written
    grown = measure(tree).bytes - empty.bytes
    assert 3 * MIB <= grown < 4 * MIB


def test_it_follows_no_link(tree: Path) -> None:
    before = measure(tree).bytes
    (tree / "to-folder").symlink_to(tree.parent / "outside")
    (tree / "to-file").symlink_to(tree.parent / "outside" / "host.bin")
    assert measure(tree).bytes - before < MIB  # the links' own few bytes, not 4 MiB each


def test_a_hard_linked_file_counts_once(tree: Path) -> None:
    (tree / "one.bin").write_bytes(b"x" * 2 * MIB)
    once = measure(tree).bytes
    for n in range(5):
        os.link(tree / "one.bin", tree / f"link{n}")
    assert measure(tree).bytes == once


def test_odd_entries_are_counted_not_opened(tree: Path) -> None:
    os.mkfifo(tree / "fifo")  # opening it would block for ever
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tree / "socket"))
    (tree.joinpath(os.fsdecode(b"\xff\xfe-not-utf8"))).write_bytes(b"n" * MIB)
    try:
        usage = measure(tree)
    finally:
        listening.close()
    assert usage.unmeasured is None
    assert usage.bytes >= MIB


def test_a_folder_swapped_for_a_link_is_not_followed(tree: Path) -> None:
    """The race a command can run while Herald walks: a folder listed, then replaced by a
    link (to a host folder) before it is opened, itself or a folder above it."""
    outside = tree.parent / "outside"
    (tree / "a" / "b").mkdir(parents=True)
    (outside / "b").mkdir()
    top = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listed = (tree / "a" / "b").lstat()
        found = open_folder(top, "a/b", listed.st_dev, listed.st_ino)
        assert found is not None  # the control
        os.close(found)
        os.rename(tree / "a", tree / "a-moved")
        (tree / "a").symlink_to(outside)  # a/b now leads to the host's outside/b
        assert open_folder(top, "a/b", listed.st_dev, listed.st_ino) is None
        (tree / "a").unlink()
        (tree / "a").symlink_to(tree / "a-moved")
        b = tree / "a-moved" / "b"
        os.rename(b, tree / "b-moved")
        b.symlink_to(outside / "b")
        with pytest.raises(NotADirectoryError):  # O_NOFOLLOW | O_DIRECTORY on a link
            open_folder(top, "a-moved/b", listed.st_dev, listed.st_ino)
    finally:
        os.close(top)


def test_it_stops_at_its_entry_limit(tree: Path) -> None:
    for n in range(30):
        (tree / f"f{n}").touch()
    assert measure(tree, max_entries=30).unmeasured is None
    stopped = measure(tree, max_entries=29)
    assert stopped.unmeasured == "it holds more than 29 files and folders"


def test_folders_nested_past_what_a_path_holds(tree: Path) -> None:
    name = "n" * 250
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(20):  # 20 x 251 bytes: past the kernel's 4,096-byte paths
        os.mkdir(name, dir_fd=fd)
        deeper = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(fd)
    assert measure(tree).unmeasured == "its folders are nested too deep to measure"


@pytest.fixture
def owned() -> Iterator[Path]:
    """A workspace a user without root's reach may walk: owned by nobody when the tests run
    as root (who could read any folder), under a folder all may enter."""
    root = Path(tempfile.mkdtemp(prefix="herald-usage-test-", dir="/var/tmp"))
    root.chmod(0o755)
    workspace = root / "ws"
    workspace.mkdir()
    try:
        yield workspace
    finally:
        for path in (workspace, *workspace.rglob("*")):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)  # so that it may be removed
        shutil.rmtree(root)


def measure_unprivileged(root: Path) -> str | None:
    """What :func:`measure` could not measure, run by a user without root's reach."""
    if os.geteuid() != 0:
        return measure(root).unmeasured
    for path in (root, *root.rglob("*")):
        os.lchown(path, NOBODY, NOBODY)
    code = (
        "import sys; from pathlib import Path; from gateway.tools._disk_usage import measure; "
        "print(measure(Path(sys.argv[1])).unmeasured)"
    )
    drop = [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}"]
    done = subprocess.run(
        [*drop, "--clear-groups", sys.executable, "-c", code, str(root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    said = done.stdout.strip()
    return None if said == "None" else said


@pytest.mark.parametrize("mode", [0o000, 0o444], ids=["unreadable", "not searchable"])
def test_a_folder_it_cannot_read_counts_as_unmeasured(owned: Path, mode: int) -> None:
    hidden = owned / "hidden"
    hidden.mkdir()
    (hidden / "big.bin").write_bytes(b"b" * MIB)
    assert measure_unprivileged(owned) is None  # the control: readable, measured
    hidden.chmod(mode)
    assert measure_unprivileged(owned) == "the folder 'hidden' cannot be read"

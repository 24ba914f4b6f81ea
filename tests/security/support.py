"""What the security tests share: raw HTTP requests (bytes on the wire, no client-side
normalising of the path), snapshots of directory trees, and searching for secrets."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Guard against a hung request; never an assertion about speed.
RAW_GUARD_SECONDS = 10
#: How much of a secret counts as a leak when it shows up on its own (a truncated echo).
SECRET_PREFIX_CHARS = 12

#: ``<state>/agents/<id>/sessions/<uuid>.jsonl`` and its archived form.
TRANSCRIPT_RE = re.compile(
    r"agents/(?P<agent>[a-z0-9][a-z0-9_-]{0,63})/sessions/"
    r"(?P<sid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl"
    r"(?:\.deleted\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z)?"
)
#: The state database and the files SQLite keeps beside it.
DB_FILE_RE = re.compile(r"herald\.db(?:-wal|-shm|-journal)?")


@dataclass(frozen=True, slots=True)
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


async def raw_request(
    port: int,
    method: str,
    target: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes = b"",
) -> RawResponse:
    """Send one HTTP/1.1 request with ``target`` exactly as given (no normalising);
    ``headers`` may replace the ``Host`` header."""
    given = dict(headers or {})
    given.setdefault("Host", "127.0.0.1")
    lines = [f"{method} {target} HTTP/1.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in given.items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    async with asyncio.timeout(RAW_GUARD_SECONDS):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()
    head, _, payload = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding", "").lower() == "chunked":
        payload = _dechunk(payload)
    return RawResponse(int(status_line.split()[1]), parsed, payload)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root`` (relative path → (mode, size)); symlinks are
    not followed."""
    out: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            out[path.relative_to(root).as_posix()] = (st.st_mode, 0 if name in dirs else st.st_size)
    return out


def unexpected_state_files(state_dir: Path, agent_ids: Iterable[str]) -> list[str]:
    """Files under the state directory that are neither the database (and SQLite's side
    files) nor a transcript of a configured agent, by the pinned layout."""
    agents = set(agent_ids)
    bad: list[str] = []
    for folder, _, files in os.walk(state_dir):
        for name in files:
            rel = Path(folder, name).relative_to(state_dir).as_posix()
            match = TRANSCRIPT_RE.fullmatch(rel)
            if DB_FILE_RE.fullmatch(rel):
                continue
            if match is None or match.group("agent") not in agents:
                bad.append(rel)
    return bad


def secret_needles(secrets: Iterable[str]) -> dict[str, str]:
    """What to search for: each secret whole and its first :data:`SECRET_PREFIX_CHARS`
    characters (a truncated echo still leaks most of a key); needle → which secret."""
    needles: dict[str, str] = {}
    for secret in secrets:
        needles[secret] = secret
        needles[secret[:SECRET_PREFIX_CHARS]] = secret
    return needles


def find_secrets(
    haystacks: Mapping[str, bytes | str], secrets: Iterable[str]
) -> list[tuple[str, str, str]]:
    """``(where, needle, context)`` for every needle of :func:`secret_needles` found."""
    found: list[tuple[str, str, str]] = []
    needles = secret_needles(secrets)
    for where, data in haystacks.items():
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        for needle in needles:
            at = text.find(needle)
            if at >= 0:
                found.append((where, needle, text[max(0, at - 80) : at + len(needle) + 80]))
    return found


def state_files(state_dir: Path) -> dict[str, bytes]:
    """The bytes of every regular file under ``state_dir``, by relative path."""
    out: dict[str, bytes] = {}
    for folder, _, files in os.walk(state_dir):
        for name in files:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                out[f"state:{path.relative_to(state_dir).as_posix()}"] = path.read_bytes()
    return out

"""``exec``: run a shell command in the agent's workspace (off unless a policy allows it).

The command runs as ``/bin/sh -c <command>``, under bubblewrap unless the sandbox is off
(:mod:`gateway.tools.sandbox` says what it sees and its limits), in its own process group,
with stdin closed, stdout and stderr merged, and an environment scrubbed of Herald's and
other secrets. When the timeout passes, or when the shell exits, the whole group is killed
(in the sandbox, its PID namespace goes with it): background processes do not outlive the
call. Output beyond the cap keeps its head and its tail (the
tail is where errors usually are) with a note of what was left out. In the sandbox, a
command is refused while the workspace is over its size limit
(:mod:`gateway.tools._disk_usage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import Field

from gateway.settings import ExecConfig
from gateway.tools._disk_usage import check_workspace
from gateway.tools._paths import ensure_workspace
from gateway.tools.base import Tool, ToolContext, ToolOutput, ToolParams
from gateway.tools.errors import ToolError
from gateway.tools.sandbox import (
    BWRAP_PACKAGE,
    Limits,
    bwrap_argv,
    find_bwrap,
    limit_note,
    sandbox_environment,
)

logger = logging.getLogger(__name__)

SHELL: Final = "/bin/sh"
CHUNK_BYTES: Final = 64 * 1024
#: After the group is killed the pipe closes at once, unless a process that left the group
#: (setsid) still holds it; then stop reading rather than wait for it.
DRAIN_GRACE_SECONDS: Final = 2.0
_SECRET_SUFFIXES: Final = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_CREDENTIALS")
_SECRET_PREFIXES: Final = ("HERALD_",)
#: The service manager's channel to the daemon: a command must not speak for it.
_SYSTEMD_VARIABLES: Final = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"})


class ExecParams(ToolParams):
    command: str = Field(min_length=1, description="Shell command, run with /bin/sh -c.")
    timeout_seconds: float | None = Field(
        None, gt=0, description="Kill the command after this many seconds (capped by config)."
    )


def scrubbed_environment(
    environ: Mapping[str, str], secrets: Collection[str] = ()
) -> dict[str, str]:
    """``environ`` without ``HERALD_*``, ``*_TOKEN``/``*_KEY``/``*_SECRET``-like variables,
    and any variable whose value is one of ``secrets`` (the configured secret values, which
    may come from variables named otherwise, or from systemd's ``NOTIFY_SOCKET`` family)."""
    return {
        key: value
        for key, value in environ.items()
        if not key.upper().startswith(_SECRET_PREFIXES)
        and not key.upper().endswith(_SECRET_SUFFIXES)
        and key not in _SYSTEMD_VARIABLES
        and value not in secrets
    }


class _Capture:
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_cap)]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.omitted:
            return head + self.tail.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n[... {self.omitted} bytes of output omitted ...]\n{tail}"


class ExecTool(Tool[ExecParams]):
    name = "exec"
    group = "runtime"
    params = ExecParams
    description = (
        "Run a shell command (/bin/sh -c) in your workspace. stdout and stderr are merged; "
        "the exit code is reported. Long output is shortened; the command is killed at the "
        "timeout, and background processes do not survive it."
    )

    def __init__(self, config: ExecConfig) -> None:
        self.config = config

    async def run(self, params: ExecParams, ctx: ToolContext) -> ToolOutput:
        cwd = await asyncio.to_thread(ensure_workspace, ctx.workspace)
        timeout = min(
            params.timeout_seconds or self.config.timeout_seconds, self.config.timeout_seconds
        )
        env = scrubbed_environment(os.environ, ctx.settings.secret_values())
        env["PWD"] = str(cwd)
        argv = [SHELL, "-c", params.command]
        limits: Limits | None = None
        if self.config.sandbox.enabled:
            bwrap = find_bwrap()
            if bwrap is None:
                raise ToolError(
                    f"the exec sandbox needs bubblewrap, which is not installed "
                    f"(Debian package {BWRAP_PACKAGE})"
                )
            sandbox = self.config.sandbox
            # Before the command, in a thread: the walk is bounded but not instant.
            await asyncio.to_thread(check_workspace, cwd, sandbox.max_workspace_mb)
            argv = bwrap_argv(
                argv, workdir=cwd, config=sandbox, cpu_seconds=sandbox.cpu_seconds, bwrap=bwrap
            )
            env = sandbox_environment(env, cwd)
            limits = Limits.open(self.config.sandbox)  # a mkdir on cgroupfs: never blocks long
            argv = limits.wrap(argv)
        try:
            return await self._run(argv, cwd, env, limits, timeout)
        finally:
            if limits is not None:
                await limits.close()

    async def _run(
        self, argv: list[str], cwd: Path, env: dict[str, str], limits: Limits | None, seconds: float
    ) -> ToolOutput:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"cannot start {argv[0]}: {exc.strerror}") from None
        capture = _Capture(self.config.max_output_bytes)
        reader = asyncio.create_task(_drain(proc, capture))
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), seconds)
        except TimeoutError:
            timed_out = True
        finally:
            # Kills what is left of the group: the command on timeout, stray background
            # children otherwise (they would hold the pipe open). Also runs on cancel.
            _kill_group(proc.pid)
            await proc.wait()
            try:
                await asyncio.wait_for(reader, DRAIN_GRACE_SECONDS)
            except TimeoutError:
                logger.warning("exec: a detached process kept the output open; stopped reading")
        sandbox = self.config.sandbox
        note = limit_note(proc.returncode, sandbox) if sandbox.enabled else None
        return _output(proc.returncode, capture, timed_out, seconds, note)


async def _drain(proc: asyncio.subprocess.Process, capture: _Capture) -> None:
    stream = proc.stdout
    if stream is None:  # pragma: no cover - stdout=PIPE always sets it
        return
    while chunk := await stream.read(CHUNK_BYTES):
        capture.feed(chunk)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _output(
    code: int | None, capture: _Capture, timed_out: bool, timeout: float, note: str | None
) -> ToolOutput:
    text = capture.text()
    if timed_out:
        status = f"[timed out after {timeout:g}s; the command was killed]"
    elif code is not None and code < 0:
        status = f"[killed by signal {-code}]"
    else:
        status = f"[exit code {code}]"
    notes = [status] if note is None else [status, note]
    if capture.omitted:
        notes.append(
            f"[output was {capture.total} bytes; the middle {capture.omitted} were omitted]"
        )
    content = (text.rstrip("\n") + "\n" if text else "") + "\n".join(notes)
    data: dict[str, Any] = {
        "exitCode": None if timed_out else code,
        "timedOut": timed_out,
        "output": text,
        "outputBytes": capture.total,
        "truncated": bool(capture.omitted),
    }
    return ToolOutput(content=content, data=data, is_error=timed_out or code != 0)

"""A tiny Chrome DevTools Protocol client: headless Chromium driven over aiohttp's WebSocket.

Only what the browser tests need: launch Chromium with a throw-away profile, open a page
(a flattened target session), navigate, evaluate JavaScript, type, click with real mouse
events, poll the DOM until a condition holds, take a PNG screenshot, and close everything
so no process, socket or transport outlives the test.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

#: Guard against a hung browser or page; never an assertion about speed.
HANG_GUARD_SECONDS = 30.0
#: How long a closing browser gets before its process group is killed.
CLOSE_GRACE_SECONDS = 10.0
#: DOM polling interval: fast enough that a test does not idle, slow enough not to spin.
POLL_SECONDS = 0.05
#: Screenshots are a few hundred KiB of base64; aiohttp's default frame limit is 4 MiB.
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: Headless, offline, reproducible: no sandbox (CI runs as root), no GPU, and none of the
#: background traffic to Google hosts that the machine cannot reach anyway.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--mute-audio",
)
DEVTOOLS_LINE = re.compile(r"DevTools listening on (ws://\S+)")


class CdpError(Exception):
    """A DevTools command failed (``method`` names it), or JavaScript threw."""

    def __init__(self, method: str, message: str) -> None:
        super().__init__(f"{method}: {message}")
        self.method = method
        self.message = message


class BrowserGoneError(CdpError):
    """The DevTools connection closed: the browser exited or crashed."""


def find_chromium() -> str | None:
    """The path of Debian's ``chromium`` (or ``chromium-browser``), or None when absent."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is not None:
            return path
    return None


class Connection:
    """One DevTools WebSocket: numbered commands, answers matched by id, events to waiters."""

    def __init__(self, http: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._http = http
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._waiters: list[tuple[str, str | None, asyncio.Future[dict[str, Any]]]] = []
        self._listeners: list[tuple[str, str | None, Callable[[dict[str, Any]], None]]] = []
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, url: str) -> Connection:
        http = aiohttp.ClientSession()
        try:
            ws = await http.ws_connect(url, max_msg_size=MAX_FRAME_BYTES)
        except BaseException:
            await http.close()
            raise
        return cls(http, ws)

    async def call(
        self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None
    ) -> dict[str, Any]:
        """Send one command and return its ``result``; CdpError when it fails or gets no answer."""
        if self._reader.done():
            raise BrowserGoneError(method, "the DevTools connection is closed")
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = (method, answer)
        try:
            await self._ws.send_str(json.dumps(message))
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                return await answer
        except TimeoutError:
            raise CdpError(method, f"no answer within {HANG_GUARD_SECONDS:.0f} s") from None
        except ConnectionError as exc:
            raise BrowserGoneError(method, str(exc)) from exc
        finally:
            self._pending.pop(ident, None)

    def expect(self, method: str, session_id: str | None = None) -> asyncio.Future[dict[str, Any]]:
        """A future for the next ``method`` event; register it before the action causing it."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((method, session_id, future))
        return future

    def listen(
        self, method: str, session_id: str | None, callback: Callable[[dict[str, Any]], None]
    ) -> None:
        """Call ``callback`` with the params of every ``method`` event (of that session)."""
        self._listeners.append((method, session_id, callback))

    async def _read(self) -> None:
        try:
            async for frame in self._ws:
                if frame.type is aiohttp.WSMsgType.TEXT:
                    self._dispatch(json.loads(frame.data))
        finally:
            for method, answer in self._pending.values():
                if not answer.done():
                    answer.set_exception(BrowserGoneError(method, "the DevTools connection closed"))
            for method, _, future in self._waiters:
                if not future.done():
                    future.set_exception(BrowserGoneError(method, "the DevTools connection closed"))
            self._waiters.clear()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            command, answer = self._pending.get(message["id"], ("", None))
            if answer is None or answer.done():
                return
            if "error" in message:
                answer.set_exception(CdpError(command, str(message["error"].get("message"))))
            else:
                answer.set_result(message.get("result", {}))
            return
        method, session_id = message.get("method"), message.get("sessionId")
        for wanted, wanted_session, callback in self._listeners:
            if wanted == method and wanted_session in (None, session_id):
                callback(message.get("params", {}))
        keep = []
        for waiter in self._waiters:
            wanted, wanted_session, future = waiter
            if future.done():
                continue
            if wanted == method and wanted_session in (None, session_id):
                future.set_result(message.get("params", {}))
            else:
                keep.append(waiter)
        self._waiters = keep

    async def close(self) -> None:
        """Close the socket and the HTTP session; idempotent."""
        await self._ws.close()
        await self._reader
        await self._http.close()


class Page:
    """One tab, attached as a flattened session on the browser's connection."""

    def __init__(self, connection: Connection, session_id: str) -> None:
        self._connection = connection
        self.session_id = session_id
        #: Uncaught JavaScript exceptions of the page, as the console would print them.
        self.exceptions: list[str] = []
        connection.listen("Runtime.exceptionThrown", session_id, self._on_exception)

    def _on_exception(self, params: dict[str, Any]) -> None:
        details = params.get("exceptionDetails", {})
        thrown = details.get("exception", {}).get("description") or details.get("text")
        self.exceptions.append(str(thrown))

    def __repr__(self) -> str:
        return f"<Page session={self.session_id}>"

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._connection.call(method, params, self.session_id)

    async def navigate(self, url: str) -> None:
        """Go to ``url``; a new document is waited for until its load event fires."""
        loaded = self._connection.expect("Page.loadEventFired", self.session_id)
        try:
            result = await self.call("Page.navigate", {"url": url})
            if result.get("errorText"):
                raise CdpError("Page.navigate", f"{url}: {result['errorText']}")
            # A fragment-only change stays in the same document: no loader, no load event.
            if result.get("loaderId"):
                async with asyncio.timeout(HANG_GUARD_SECONDS):
                    await loaded
        finally:
            loaded.cancel()

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` (promises awaited); CdpError when it throws."""
        result = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
        )
        details = result.get("exceptionDetails")
        if details is not None:
            thrown = details.get("exception", {}).get("description") or details.get("text")
            raise CdpError("Runtime.evaluate", str(thrown))
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, what: str) -> Any:
        """Poll ``expression`` until it is truthy and return its value.

        Bounded by the hang guard; a failure names ``what`` and shows the page's text, so a
        broken page reads like a bug report rather than a timeout.
        """
        value: Any = None
        problem = ""
        try:
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                while True:
                    try:
                        value = await self.evaluate(expression)
                    except BrowserGoneError:
                        raise
                    except CdpError as exc:  # e.g. evaluated while the document was replaced
                        problem = str(exc)
                    else:
                        if value:
                            return value
                    await asyncio.sleep(POLL_SECONDS)
        except TimeoutError:
            text = ""
            with contextlib.suppress(CdpError):
                text = str(await self.evaluate("document.body ? document.body.innerText : ''"))
            last = f"last value {value!r}" + (f", {problem}" if problem else "")
            raise AssertionError(
                f"timed out waiting for {what} ({last}); the page shows:\n{text}"
            ) from None

    async def type_text(self, selector: str, text: str) -> None:
        """Focus ``selector`` and insert ``text`` as if typed (the page sees input events)."""
        found = await self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return false; el.focus(); return document.activeElement === el; })()"
        )
        if not found:
            raise CdpError("type_text", f"{selector} is missing or cannot take focus")
        await self.call("Input.insertText", {"text": text})

    async def click(self, selector: str) -> None:
        """Click the middle of ``selector`` with mouse events (a disabled button ignores them)."""
        point = await self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return null; el.scrollIntoView({block: 'center'});"
            " const r = el.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        )
        if not point:
            raise CdpError("click", f"{selector} is not on the page")
        for kind in ("mousePressed", "mouseReleased"):
            await self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": point["x"], "y": point["y"], "button": "left", "clickCount": 1},
            )

    async def screenshot(self, path: Path) -> Path:
        """Write a PNG of the visible page to ``path`` and return it."""
        result = await self.call("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(result["data"]))
        return path


class Browser:
    """A running headless Chromium and its browser-level DevTools connection."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        connection: Connection,
        stderr_tail: collections.deque[str],
        viewport: tuple[int, int],
    ) -> None:
        self.process = process
        self.connection = connection
        self.stderr_tail = stderr_tail
        self.viewport = viewport

    def __repr__(self) -> str:
        return f"<Browser pid={self.process.pid} returncode={self.process.returncode}>"

    async def new_page(self, url: str = "about:blank") -> Page:
        """Open a tab of ``viewport`` size and attach to it, its Page and Runtime enabled."""
        created = await self.connection.call("Target.createTarget", {"url": url})
        attached = await self.connection.call(
            "Target.attachToTarget", {"targetId": created["targetId"], "flatten": True}
        )
        page = Page(self.connection, attached["sessionId"])
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        # --window-size includes the window frame; the viewport is what screenshots show.
        width, height = self.viewport
        await page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page


async def _read_devtools_url(stderr: asyncio.StreamReader, tail: collections.deque[str]) -> str:
    async for raw in stderr:
        line = raw.decode(errors="replace").rstrip()
        tail.append(line)
        found = DEVTOOLS_LINE.search(line)
        if found:
            return found.group(1)
    raise CdpError("launch", "Chromium exited before DevTools listened:\n" + "\n".join(tail))


async def _drain(stderr: asyncio.StreamReader, tail: collections.deque[str]) -> None:
    # Chromium logs (D-Bus complaints and the like) must keep flowing or the pipe fills.
    async for raw in stderr:
        tail.append(raw.decode(errors="replace").rstrip())


def _kill_group(process: asyncio.subprocess.Process) -> None:
    # Chromium runs in its own session (start_new_session), so its group is its pid: this
    # ends the renderer and GPU children too, and nothing else. Only called before the
    # browser is reaped, so the group id cannot belong to anyone else yet.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def launch(
    executable: str, profile_dir: Path, viewport: tuple[int, int] = (1280, 800)
) -> AsyncIterator[Browser]:
    """Start headless Chromium with a fresh profile in ``profile_dir``; close it on exit.

    Close asks politely (``Browser.close``), waits for the process, and kills its process
    group only if it does not exit within the grace period.
    """
    profile_dir.mkdir(parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        executable,
        *FLAGS,
        f"--user-data-dir={profile_dir}",
        "--remote-debugging-port=0",
        f"--window-size={viewport[0]},{viewport[1]}",
        "about:blank",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stderr is not None  # we asked for the pipe
    tail: collections.deque[str] = collections.deque(maxlen=40)
    drain: asyncio.Future[None] | None = None
    connection: Connection | None = None
    try:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            url = await _read_devtools_url(process.stderr, tail)
        drain = asyncio.ensure_future(_drain(process.stderr, tail))
        connection = await Connection.open(url)
        log.debug("chromium pid %s at %s", process.pid, url)
        yield Browser(process, connection, tail, viewport)
    finally:
        if connection is not None:
            with contextlib.suppress(CdpError):
                await connection.call("Browser.close")
            await connection.close()
        try:
            async with asyncio.timeout(CLOSE_GRACE_SECONDS):
                await process.wait()
        except TimeoutError:
            log.warning("chromium pid %s did not exit; killing its process group", process.pid)
            _kill_group(process)
            await process.wait()
        if drain is not None:
            # EOF comes once every child holding the pipe (renderer, GPU, zygote) is gone.
            await drain

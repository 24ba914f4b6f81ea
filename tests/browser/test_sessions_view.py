"""The web page's Sessions view, a read-only transcript browser, in a real headless Chromium
against a real ``herald run`` with a token (issue 15 item 8).

Sessions are listed with their channel, last activity, tokens and cost (archived ones on
request); any session's transcript shows its messages, tool calls and results folded, events
and the tokens of each model call and turn, read through the API with the page's token.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.async_api import Page, Request, expect

from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.state import Origin
from tests.browser.support import (
    DESKTOP,
    NARROW,
    SPAWN_REQUEST,
    TOKEN,
    Session,
    no_sideways_scroll,
    send,
    shot,
    wait_online,
)
from tests.gateway.sessions.support import opened_store

pytestmark = pytest.mark.slow

ARCHIVED_KEY = "agent:main:webchat:earlier-client"


async def record_archived_session(state_dir: Path) -> None:
    """An archived web chat conversation: a tool round, two priced replies and an event."""
    origin = Origin(channel="webchat", account="local", chat_id="earlier-client", chat_type="dm")
    async with opened_store(state_dir) as store:
        record = await store.ensure(ARCHIVED_KEY, origin=origin, model="demo/scripted")
        call = ToolCall(id="c1", name="read", arguments={"path": "notes.md"})
        await store.append_message(record, ChatMessage(role="user", content="read my notes"))
        await store.append_message(
            record,
            ChatMessage(role="assistant", content="", tool_calls=(call,)),
            model="scripted",
            usage=Usage(1500, 20),
        )
        await store.append_message(
            record,
            ChatMessage(
                role="tool", content="line one\nline two", tool_call_id="c1", tool_name="read"
            ),
        )
        await store.append_message(
            record,
            ChatMessage(role="assistant", content="Your notes have two lines."),
            model="scripted",
            usage=Usage(1600, 9),
        )
        await store.append_event(record, "status", {"note": "compacted nothing"})
        await store.add_usage(record.key, Usage(3100, 29), 0.0123)
        await store.archive(record.key)


async def open_sessions(page: Page) -> None:
    await page.locator("#nav-sessions").click()
    await expect(page.locator("#sessions-view")).to_be_visible()
    await expect(page.locator("#chat-view")).to_be_hidden()


async def test_sessions_and_transcripts_are_browsed_read_only_with_the_token(
    session: Session, tmp_path: Path
) -> None:
    await record_archived_session(tmp_path / "state")
    async with session(token=TOKEN) as (daemon, tab):
        page = tab.page
        api_calls: list[Request] = []
        page.on("request", lambda r: api_calls.append(r) if "/v1/" in r.url else None)
        await page.set_viewport_size(DESKTOP)
        await page.goto(f"{daemon.url}/#token={TOKEN}")
        await wait_online(page)
        await send(page, SPAWN_REQUEST)
        await expect(page.locator(".msg.announce")).to_have_count(1)

        await open_sessions(page)
        sessions = page.locator("#sessions > li.session")
        chat = sessions.filter(has=page.locator(".session-key", has_text=":webchat:")).first
        run = sessions.filter(has=page.locator(".session-title", has_text="Sub-agent research"))
        await expect(chat).to_be_visible()
        # Titles a person recognises: the chat and the first words of its first message.
        await expect(chat.locator(".session-title")).to_have_text(
            "Web chat — research the history of tea in the background"
        )
        await expect(run.locator(".session-title")).to_have_text(
            "Sub-agent research — Research the history of tea"
        )
        await expect(chat.locator(".session-channel")).to_have_text("webchat")
        await expect(chat.locator(".session-model")).not_to_have_text("")
        await expect(chat.locator(".session-tokens")).to_have_text(
            re.compile(r"^\d+(\.\d)?k tokens$")
        )
        await expect(chat.locator(".session-cost")).to_have_text(re.compile(r"^\$\d+\.\d{2,4}$"))
        await expect(chat.locator("time")).to_have_attribute("datetime", re.compile(r"^\d{4}-"))
        await expect(run.locator(".session-channel")).to_have_text("webchat · sub-agent")
        # Archived sessions only on request.
        archived = sessions.filter(has=page.locator(".session-key", has_text=ARCHIVED_KEY))
        await expect(archived).to_have_count(0)
        await page.locator("#sessions-archived").check()
        await expect(archived).to_have_count(1)
        await expect(archived).to_have_attribute("data-archived", "true")
        await expect(archived.locator(".session-archived")).to_contain_text("archived")
        await expect(archived.locator(".session-tokens")).to_have_text("3.1k tokens")
        await expect(archived.locator(".session-cost")).to_have_text("$0.01")
        await shot(page, tmp_path / "sessions-desktop.png")

        # The sub-agent's transcript: its task, the tool round folded, events, usage.
        await run.locator("a.session-link").click()
        await expect(page).to_have_url(re.compile(r"#sessions/agent%3Amain%3Asubagent%3A"))
        records = page.locator("#transcript > li.tx-record")
        await expect(records.first).to_have_attribute("data-type", "session")
        await expect(page.locator("#transcript-info")).to_contain_text("demo/scripted")
        task = records.filter(has=page.locator(".tx-who", has_text="Task"))
        await expect(task).to_contain_text("Research the history of tea")
        call = page.locator("#transcript details.tx-tool-call").first
        await expect(call.locator("summary")).to_have_text('→ ls({"path":"."})')
        await expect(call.locator("pre")).to_be_hidden()
        await call.locator("summary").click()
        await expect(call.locator("pre")).to_be_visible()
        await expect(call.locator("pre")).to_contain_text('"path": "."')
        result = page.locator("#transcript details.tx-tool-result").first
        await expect(result.locator("summary")).to_have_text(re.compile(r"^Result of ls · 1 line$"))
        await expect(result.locator("pre")).to_be_hidden()
        events = page.locator("#transcript details.tx-event-data summary")
        await expect(events.first).to_have_text("Event spawned")
        await expect(page.locator("#transcript .tx-usage").first).to_contain_text("tokens")
        await expect(page.locator("#transcript .tx-turn").first).to_have_text(
            re.compile(r"^Turn: 2 model calls · tokens ")
        )
        await shot(page, tmp_path / "transcript-desktop.png")

        # An archived session's transcript, opened by its address, on a phone.
        await page.set_viewport_size(NARROW)
        await page.goto(f"{daemon.url}/#sessions/{quote(ARCHIVED_KEY, safe='')}")
        info = page.locator("#transcript-info")
        await expect(info).to_contain_text("Archived")
        await expect(info).to_contain_text("$0.01")
        roles = page.locator("#transcript > li.tx-record[data-type='message'] .tx-who")
        await expect(roles).to_have_text(["User", "Assistant", "Assistant"])
        read = page.locator("#transcript details.tx-tool-result")
        await expect(read.locator("summary")).to_have_text("Result of read · 2 lines")
        await expect(page.locator("#transcript .tx-usage")).to_have_text(
            [
                "scripted · tokens 1.5k (in 1.5k / out 20)",
                "scripted · tokens 1.6k (in 1.6k / out 9)",
            ]
        )
        await expect(page.locator("#transcript .tx-turn")).to_have_text(
            ["Turn: 2 model calls · tokens 3.1k (in 3.1k / out 29)"]
        )
        status = page.locator("#transcript details.tx-event-data")
        await expect(status.locator("summary")).to_have_text("Event status")
        await status.locator("summary").click()
        await expect(status.locator("pre")).to_contain_text('"note": "compacted nothing"')
        assert await no_sideways_scroll(page)
        await shot(page, tmp_path / "transcript-375.png")
        await page.locator("a.back").click()
        await expect(page.locator("#sessions > li.session").first).to_be_visible()
        assert await no_sideways_scroll(page)
        await shot(page, tmp_path / "sessions-375.png")

        # Read-only: the view only ever reads, and always with the page's token.
        assert api_calls
        assert {r.method for r in api_calls} == {"GET"}
        for request in api_calls:
            assert await request.header_value("authorization") == f"Bearer {TOKEN}"
        # Without the token the API refuses, and the view says why.
        await page.evaluate("window.localStorage.removeItem('herald.webchat.token')")
        await page.locator("#sessions-refresh").click()
        await expect(page.locator("#sessions-note")).to_have_text(
            "The gateway's token is needed to read sessions."
        )
        # Back to the chat: the conversation is still there.
        await page.locator("#nav-chat").click()
        await expect(page.locator("#chat-view")).to_be_visible()
        await expect(page.locator(".msg.announce")).to_have_count(1)
        assert tab.errors == []
    assert all(TOKEN not in line for line in daemon.raw)

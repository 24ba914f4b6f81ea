"""The web chat through the gateway's own app and wiring: each client id is its own
conversation, even where two ids differ only in case."""

from __future__ import annotations

from pathlib import Path

import orjson
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import AppParts, build_app
from gateway.reload import SettingsHolder
from gateway.sessions import SessionKey
from gateway.settings import HeraldSettings
from tests.channels.webchat.conftest import Page
from tests.gateway.harness import base_config, merge

SCRIPT = {"rules": [{"match": r"^say (.+)$", "reply": "said $1"}], "default": {"reply": "?"}}


async def test_client_ids_that_differ_only_in_case_are_separate_conversations(
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps(SCRIPT))
    state = tmp_path / "state"
    data = merge(base_config(state, script), {"channels": {"webchat": {"enabled": True}}})
    app = build_app(SettingsHolder(HeraldSettings.model_validate(data)), config_dir=tmp_path)
    async with TestClient(TestServer(app)) as client:
        pages: dict[str, Page] = {}
        for client_id in ("Ab", "aB", "ab"):
            page = pages[client_id] = Page(await client.ws_connect("/webchat/ws"))
            await page.send({"type": "hello", "clientId": client_id})
            assert await page.next() == {"type": "ready", "clientId": client_id}
        for client_id, page in pages.items():
            await page.send({"type": "message", "text": f"say {client_id}"})
            reply = await page.next_of("message")
            while reply["kind"] != "reply":
                reply = await page.next_of("message")
            # Frames to a page keep their order: another client's reply would come first.
            assert reply["text"] == f"said {client_id}"
        store = AppParts(app).store
        for client_id in pages:
            key = str(SessionKey.webchat("main", client_id))
            history = [m["content"] for m in await store.history(key)]
            assert history == [f"say {client_id}", f"said {client_id}"]
        keys = {s.key for s in await store.list() if ":webchat:" in s.key}
        assert len(keys) == 3
        for page in pages.values():
            await page.close()
    # Three history files whose names differ even where a filesystem ignores case.
    files = sorted(p.name for p in (state / "webchat").glob("*.jsonl"))
    assert len({name.lower() for name in files}) == 3
    assert "ab.jsonl" in files


async def test_a_client_id_equal_to_another_clients_normalised_id_is_a_conversation_of_its_own(
    tmp_path: Path,
) -> None:
    # "VictimBrowserId42" normalises to "victimbrowserid42-<hash>"; a browser that says hello
    # with that string as its raw id must neither be replayed the victim's history nor post
    # into the victim's session.
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps(SCRIPT))
    state = tmp_path / "state"
    data = merge(base_config(state, script), {"channels": {"webchat": {"enabled": True}}})
    app = build_app(SettingsHolder(HeraldSettings.model_validate(data)), config_dir=tmp_path)
    victim_id = "VictimBrowserId42"
    alias = SessionKey.webchat("main", victim_id).subject
    assert alias is not None
    assert alias != victim_id
    async with TestClient(TestServer(app)) as client:
        victim = Page(await client.ws_connect("/webchat/ws"))
        await victim.send({"type": "hello", "clientId": victim_id})
        assert await victim.next() == {"type": "ready", "clientId": victim_id}
        await victim.send({"type": "message", "text": "say secret"})
        while (await victim.next_of("message"))["kind"] != "reply":
            pass
        await victim.close()
        attacker = Page(await client.ws_connect("/webchat/ws"))
        await attacker.send({"type": "hello", "clientId": alias})
        # Nothing of the victim's is replayed: the first frame after ready is the reply to
        # the attacker's own message.
        assert await attacker.next() == {"type": "ready", "clientId": alias}
        await attacker.send({"type": "message", "text": "say mine"})
        frame = await attacker.next_of("message")
        while frame["kind"] != "reply":
            assert "secret" not in str(frame)
            frame = await attacker.next_of("message")
        assert frame["text"] == "said mine"
        await attacker.close()
        store = AppParts(app).store
        victim_history = await store.history(str(SessionKey.webchat("main", victim_id)))
        assert [m["content"] for m in victim_history] == ["say secret", "said secret"]
        attacker_key = SessionKey.webchat("main", alias)
        assert attacker_key != SessionKey.webchat("main", victim_id)
        assert [m["content"] for m in await store.history(str(attacker_key))] == [
            "say mine",
            "said mine",
        ]
    assert len(list((state / "webchat").glob("*.jsonl"))) == 2

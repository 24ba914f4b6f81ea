"""A chat API unreachable when the daemon starts is a fault, not a config error: the gateway
starts, ``/readyz`` answers 503 naming the channel while it retries, the web chat works
meanwhile, and the process still stops cleanly (exit 0). Systemd's
``RestartPreventExitStatus=78`` would otherwise stop the service for good after a network
blip at boot."""

from __future__ import annotations

import signal
from pathlib import Path

import aiohttp

from gateway.constants import EXIT_CONFIG
from tests.fakes.network import closed_port
from tests.fakes.slack import FakeSlack
from tests.gateway.daemon_process import daemon_config, free_port, herald, webchat_page


def _slack(api_base_url: str, bot_token: str = "xoxb-1-test") -> dict[str, object]:
    return {
        "enabled": True,
        "mode": "socket",
        "botToken": bot_token,
        "appToken": "xapp-1-test",
        "apiBaseUrl": api_base_url,
    }


async def test_slack_unreachable_at_start_the_gateway_serves_and_readyz_names_it(
    tmp_path: Path,
) -> None:
    port = free_port()
    unreachable = f"http://127.0.0.1:{closed_port()}/api/"
    channels = {"webchat": {"enabled": True}, "slack": _slack(unreachable)}
    config = daemon_config(tmp_path, port, channels=channels)
    async with herald("run", "--config", str(config), port=port) as daemon:
        await daemon.wait_healthy()
        assert any("retrying in the background" in line for line in daemon.raw)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{daemon.url}/readyz") as response:
                assert response.status == 503
                body = await response.json()
            assert body["channels"] == {"slack": False, "webchat": True}
            # The web chat answers meanwhile (the demo model).
            async with webchat_page(http, daemon.url, "during-outage") as page:
                await page.ws.send_json({"type": "message", "text": "hello"})
                await page.wait(
                    lambda frames: any(f.get("kind") == "reply" for f in frames if "kind" in f)
                )
        daemon.process.send_signal(signal.SIGTERM)
        assert await daemon.wait_exit() == 0
    assert all("Traceback" not in line for line in daemon.raw)


async def test_slack_refusing_the_token_is_still_a_config_error(tmp_path: Path) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        slack = _slack(fake.api_base_url, bot_token="xoxb-wrong")
        config = daemon_config(tmp_path, free_port(), channels={"slack": slack})
        async with herald("run", "--config", str(config)) as daemon:
            assert await daemon.wait_exit() == EXIT_CONFIG
        assert any("invalid_auth" in line for line in daemon.raw)
    finally:
        await fake.close()

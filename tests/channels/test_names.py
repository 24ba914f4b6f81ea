"""The chat packages' public names: each one ``__all__`` lists (the names the type checker
sees imported) loads, the channel classes on first use only, so that loading or checking
the configuration does not import the chat SDKs."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["channels.slack", "channels.discord", "channels.webchat"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_loads(name: str) -> None:
    package = importlib.import_module(name)
    missing = [public for public in package.__all__ if not hasattr(package, public)]
    assert missing == []


@pytest.mark.parametrize("name", PACKAGES)
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    assert not hasattr(importlib.import_module(name), "Channl")


def test_the_packages_do_not_import_the_channels_until_asked() -> None:
    # A fresh interpreter: this one has long loaded the SDKs for other tests.
    code = (
        "import sys, channels.slack, channels.discord, channels.webchat\n"
        "heavy = ('slack_bolt', 'discord', 'channels.slack.channel',\n"
        "         'channels.discord.channel', 'channels.webchat.channel')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "channels.slack.SlackChannel\n"
        "print('slack_bolt' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split("\n")[:2] == ["[]", "True"]

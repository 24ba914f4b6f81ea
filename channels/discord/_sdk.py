"""discord.py, imported without its import-time deprecation warning.

discord.py imports the standard library's ``audioop`` (for voice, which Herald never uses),
deprecated since Python 3.11; under ``-W error`` or pytest's ``filterwarnings = error`` that
warning would fail the import. Herald's Discord modules import ``discord`` from here.
The module also turns off discord.py's warnings about voice libraries Herald does not need.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*audioop", category=DeprecationWarning)
    import discord
    import discord.gateway
    import discord.http

# Herald never joins voice: skip discord.py's one-time warnings about missing voice libraries.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

__all__ = ["discord"]

"""``herald`` at test speed: its cluster takes a killed replica's work over in seconds, not
half a minute, and its Discord channel is ready as soon as the fake Discord has sent its
guilds. Started by the subprocess tests that kill a replica (or a one-replica cluster) and
wait for a takeover, and by those that start a Discord-enabled ``herald run`` again and
again.

Decision: a takeover's periods (:class:`gateway.cluster.QueueTiming`, the replicas'
heartbeat) follow from the 60 s takeover promise, and discord.py's wait for more guilds
after the last one (:data:`channels.discord.channel.GUILD_READY_TIMEOUT`, 2 s) from
Discord's behaviour: neither is configuration, so Herald has no config key and reads no
environment variable that changes them. A test starts this module instead of
``python -m gateway``: it runs Herald's own ``main`` with :data:`QUICK` in place of the
default :class:`gateway.Timing` and a Discord channel that waits
:data:`GUILD_READY_SECONDS`, so everything else is the ``herald run`` a user starts. The
default periods stay covered: ``tests/cluster/test_failover.py`` kills replicas that run
them (``bench/cluster.py``'s failover part measures them against the promise), and
``tests/gateway/cluster/test_timing.py`` checks that they add up to less than a minute.
"""

from __future__ import annotations

import sys
from typing import Any
from unittest import mock

import channels.discord
from gateway import app
from gateway.cli import main
from gateway.cluster import QueueTiming
from gateway.parts.timing import Timing

#: Heartbeats every half second; a worker silent for 5 s (ten missed beats) and a replica
#: silent for 10 s (twenty; as the in-process tests' timing) are dead: quick, yet a silence
#: no loaded test machine makes by accident (a live replica taken for dead would run its
#: work twice, which the tests would see).
QUICK = Timing(
    replica_heartbeat_seconds=0.5,
    replica_dead_seconds=10.0,
    queue=QueueTiming(
        heartbeat_seconds=0.5,
        stalled_seconds=5.0,
        stalled_check_seconds=0.5,
        sweep_seconds=1.0,
        poll_seconds=0.5,
    ),
)
#: The fake Discord sends every guild right after READY: no need to wait for more.
GUILD_READY_SECONDS = 0.01


def discord_channel(*args: Any, **kwargs: Any) -> Any:
    """The Discord channel, waiting :data:`GUILD_READY_SECONDS` for more guilds."""
    from channels.discord.channel import DiscordChannel

    return DiscordChannel(*args, guild_ready_timeout=GUILD_READY_SECONDS, **kwargs)


if __name__ == "__main__":
    # Set in the package's namespace, where the gateway imports it from when Discord is
    # enabled: its ``__getattr__`` would import discord.py for every run otherwise.
    vars(channels.discord)["DiscordChannel"] = discord_channel
    with mock.patch.object(app, "Timing", return_value=QUICK):
        sys.exit(main())

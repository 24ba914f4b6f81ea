"""``herald`` whose cluster takes a killed replica's work over in seconds, not half a
minute: started by the tests that kill a replica (or a one-replica cluster) and wait for
its runs, schedules or messages to be taken over.

Decision: a takeover's periods (:class:`gateway.cluster.QueueTiming`, the replicas'
heartbeat) follow from the 60 s takeover promise and are not configuration, so Herald has
no config key and reads no environment variable that changes them. A test that must see a
takeover starts this module instead of ``python -m gateway``: it runs Herald's own
``main`` with :data:`QUICK` in place of the default :class:`gateway.wiring.Timing`, so
everything else is the ``herald run`` a user starts. The default periods stay covered:
``tests/cluster/test_failover.py`` kills replicas that run them (``bench/cluster.py``'s
failover part measures them against the promise), and
``tests/gateway/cluster/test_timing.py`` checks that they add up to less than a minute.
"""

from __future__ import annotations

import sys
from unittest import mock

from gateway import app
from gateway.cli import main
from gateway.cluster import QueueTiming
from gateway.wiring import Timing

#: Heartbeats every half second; a worker silent for 5 s (ten missed beats) and a replica
#: silent for 6 s are dead: quick, yet a silence no loaded test machine makes by accident
#: (a live replica taken for dead would run its work twice, which the tests would see).
QUICK = Timing(
    replica_heartbeat_seconds=0.5,
    replica_dead_seconds=6.0,
    queue=QueueTiming(
        heartbeat_seconds=0.5,
        stalled_seconds=5.0,
        stalled_check_seconds=0.5,
        sweep_seconds=1.0,
        poll_seconds=0.5,
    ),
)

if __name__ == "__main__":
    with mock.patch.object(app, "Timing", return_value=QUICK):
        sys.exit(main())

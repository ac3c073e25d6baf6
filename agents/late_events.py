"""Late events: a DML event behind a time tick above its timestamp is dropped by every consumer.

The time-tick contract (``agents/rootcoord/timetick.py``) is that every event with ``ts < t`` on a
dml partition precedes the tick ``t`` there. The only way to break it is a proxy that kept
publishing after its lease expired (paused past it): the rootcoord stopped waiting for it. Such a
proxy never acknowledges those events (``agents/proxy/fence.py``), and every consumer drops them,
by the same rule in the same log order, so the data node's segments and the query node's growing
segments agree: a Strong read answered before the event arrived is never contradicted by it.

A consumer that starts at a checkpoint takes the checkpoint's tick as the last one seen (it is
the last tick before the checkpoint's offset).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def dropped_as_late(role: str, kind: str, pchannel: str, offset: int, event_ts: int, last_tick: int) -> bool:
    """:func:`is_late`, logging the event it drops (``role`` names the consumer)."""
    if not is_late(event_ts, last_tick):
        return False
    log.warning("%s: late %s at %s@%d (ts %d < tick %d) dropped", role, kind, pchannel, offset, event_ts, last_tick)
    return True


def is_late(event_ts: int, last_tick: int) -> bool:
    """True when an insert or delete stamped ``event_ts`` comes after the tick ``last_tick``
    (strictly above it) on its partition: it broke the time-tick contract and is dropped. An
    event stamped exactly at a tick may follow it (the contract covers ``ts < tick`` only)."""
    return event_ts < last_tick

"""An adaptive fetch wait for aiokafka consumers: short while records flow, long once idle.

The broker parks a fetch with no records for its wait (``fetch_max_wait_ms``) and answers it as
soon as a record arrives on *any partition in it*. So the wait costs no latency when the fetch in
flight holds every assigned partition; it costs up to the wait when it does not: aiokafka leaves
out of its next fetch a partition whose fetched records are still waiting to be taken, or that is
paused (or has no position yet), and such a partition's next records wait for the fetch in flight
to come back. A short wait (``consumer_fetch_wait_ms``, 20 ms) bounds that; it also makes every
idle consumer ask 50 times a second: on two cores an idle stack used ~0.45 of a core, about half
of which this policy saves (docs/decisions.md: broker 22-34% -> 15-17%, each Faust worker ~6% ->
2.5-3%, Strong reads no slower).

:class:`FetchWaitPolicy` asks the broker to park the long wait only when both hold:

- the fetch holds every assigned partition (none buffered, paused or awaiting a position), so a
  record on any of them ends the wait at once;
- the last ``idle_after`` fetches came back empty: after records, the consumer keeps the short
  wait for a while (a hedge for whatever else follows records; ~100 ms at the defaults).

Otherwise the short wait. :func:`adapt_fetch_wait` installs a policy on a started consumer's
fetcher (aiokafka 0.14, pinned: it reads ``_fetch_max_wait_ms`` each time it builds a fetch in
``_get_actions_per_node``, and ``_proc_fetch_request`` returns whether a response added records).
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer

IDLE_AFTER_EMPTY_FETCHES = 5  # empty fetches in a row (at the short wait: ~100 ms) before the long wait


class FetchWaitPolicy:
    """Which wait the next fetch asks for, from what the last fetches brought (pure logic)."""

    def __init__(self, busy_ms: int, idle_ms: int, idle_after: int = IDLE_AFTER_EMPTY_FETCHES) -> None:
        if busy_ms <= 0 or idle_ms < busy_ms:
            raise ValueError(f"fetch waits: busy_ms ({busy_ms}) must be > 0 and <= idle_ms ({idle_ms})")
        self.busy_ms = busy_ms
        self.idle_ms = idle_ms
        self.idle_after = idle_after
        self.empty_streak = 0  # fetches in a row that added no record

    @property
    def quiet(self) -> bool:
        """The last ``idle_after`` fetches came back empty."""
        return self.empty_streak >= self.idle_after

    def observe(self, had_records: bool) -> None:
        """A fetch came back; ``had_records``: it added records to the consumer's buffer."""
        self.empty_streak = 0 if had_records else self.empty_streak + 1

    def wait_ms(self, holds_every_partition: bool) -> int:
        """The wait of a fetch about to be sent; ``holds_every_partition``: no assigned partition
        is left out of it."""
        if holds_every_partition and self.quiet:
            return self.idle_ms
        return self.busy_ms


def holds_every_partition(fetcher: Any, assignment: Any) -> bool:
    """Whether aiokafka's next fetch would hold every partition of ``assignment``: none has
    fetched records waiting to be taken, none is paused, all have a position."""
    records = fetcher._records
    for tp in assignment.tps:
        if tp in records:
            return False
        state = assignment.state_value(tp)
        if state.paused or not state.has_valid_position:
            return False
    return True


def adapt_fetch_wait(consumer: AIOKafkaConsumer, policy: FetchWaitPolicy) -> None:
    """Make ``consumer``'s fetcher (started: ``consumer.start()`` made it) ask for ``policy``'s wait.
    The fetcher's own methods are wrapped on the instance; nothing else of it changes."""
    fetcher = consumer._fetcher
    actions = fetcher._get_actions_per_node
    proc = fetcher._proc_fetch_request

    def get_actions_per_node(assignment: Any) -> Any:
        # the partitions are looked at only when the policy is quiet (the walk runs on every turn
        # of the fetcher's loop, so not on each one while records flow)
        fetcher._fetch_max_wait_ms = policy.wait_ms(policy.quiet and holds_every_partition(fetcher, assignment))
        return actions(assignment)

    async def proc_fetch_request(assignment: Any, node_id: int, request: Any) -> bool:
        had_records = bool(await proc(assignment, node_id, request))
        policy.observe(had_records)
        return had_records

    fetcher._get_actions_per_node = get_actions_per_node
    fetcher._proc_fetch_request = proc_fetch_request

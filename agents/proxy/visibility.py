"""Publish -> visible, sampled: how long a ``dml-request`` record takes to be read by a Strong search.

A request is visible once every shard of its collection has a tsafe at or above the timestamp
of its ``dml`` events (the result's ``ts``): a Strong read that starts then sees its rows, and
none before. The query nodes know their tsafe; the proxy does not. So the proxy asks them: a
``count(*)`` with the guarantee timestamp set to the request's ``ts``. A query node answers it only
once its tsafe has passed that timestamp (``ShardDelegator.wait_tsafe``), so the answer comes
back when the rows are visible. The count itself is O(1) per segment without deletes.

A probe per request would double the read load of a busy writer. :class:`VisibilityProbe` keeps
at most one probe in flight and starts at most one per ``interval_s``. It takes the request that
was applied when a probe is due, so the figures are a sample, one a second by default.

Two latencies per probe:

- ``taken_to_visible_ms``: from this proxy taking the record to visible, on one monotonic clock;
- ``publish_to_visible_ms``: from the record's Kafka timestamp to visible. That is the
  producer's clock (CreateTime, the default) against this proxy's wall clock, so it is only as
  good as the two clocks agree (on one host, exactly).

A probe that fails (the collection is not loaded, or was dropped or re-created under its name
since: its id differs) counts as a failure and is not retried; the next applied request after
the interval is probed instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from schemas.errors import CollectionNotFound
from schemas.status import VisibilityHealth
from state.readpath.read_params import QueryParams
from streams.tasks import cancel_and_wait

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 1.0  # at most one probe started per this many seconds
PROBE_TIMEOUT_S = 30.0  # a probe gives up (and counts as failed) after this long

# (collection name or alias, collection id, guarantee ts, timeout s) -> when visible; raises if not
CountAt = Callable[[str, int, int, float], Awaitable[None]]


class VisibilityProbe:
    """Sampled publish -> visible latency of applied requests (module doc).

    :meth:`offer` is called for every applied request and returns at once; it starts a probe
    task only when none is in flight and ``interval_s`` passed since the last one started.
    ``clock`` is monotonic seconds, ``wall_ms`` wall-clock milliseconds (injectable for tests).
    """

    def __init__(
        self,
        wait_visible: CountAt,
        interval_s: float = PROBE_INTERVAL_S,
        timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], float] = lambda: time.time() * 1000,
    ) -> None:
        self._wait_visible = wait_visible
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._wall_ms = wall_ms
        self._task: asyncio.Task[None] | None = None
        self._last_start: float | None = None
        self.probes = 0
        self.failures = 0
        self.last_error = ""
        self.last_taken_to_visible_ms: float | None = None
        self.last_publish_to_visible_ms: float | None = None
        self._taken_sum_ms = 0.0
        self._published_sum_ms = 0.0
        self._published_probes = 0

    def due(self) -> bool:
        """Whether :meth:`offer` would start a probe now."""
        if self._task is not None and not self._task.done():
            return False
        return self._last_start is None or self._clock() - self._last_start >= self.interval_s

    def offer(
        self, collection: str, collection_id: int, ts: int, taken_at: float, published_ms: int | None
    ) -> asyncio.Task[None] | None:
        """Probe this applied request if a probe is due (:meth:`due`): the task, else None.
        ``taken_at`` is when the record was taken (``clock``), ``published_ms`` its Kafka
        timestamp (None or 0: unknown)."""
        if ts <= 0 or not self.due():
            return None
        self._last_start = self._clock()
        self._task = asyncio.ensure_future(self._probe(collection, collection_id, ts, taken_at, published_ms or None))
        return self._task

    async def _probe(
        self, collection: str, collection_id: int, ts: int, taken_at: float, published_ms: int | None
    ) -> None:
        try:
            await self._wait_visible(collection, collection_id, ts, self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failures += 1
            self.last_error = str(exc) or type(exc).__name__
            log.debug("visibility probe of %s at %d failed: %s", collection, ts, self.last_error)
            return
        self.probes += 1
        self.last_taken_to_visible_ms = (self._clock() - taken_at) * 1000
        self._taken_sum_ms += self.last_taken_to_visible_ms
        if published_ms is not None:
            self.last_publish_to_visible_ms = max(0.0, self._wall_ms() - published_ms)
            self._published_sum_ms += self.last_publish_to_visible_ms
            self._published_probes += 1

    async def stop(self) -> None:
        """Cancel the probe in flight, if any."""
        if self._task is not None:
            await cancel_and_wait([self._task])

    def health(self) -> VisibilityHealth:
        return VisibilityHealth(
            probes=self.probes,
            failures=self.failures,
            last_error=self.last_error,
            last_taken_to_visible_ms=_round(self.last_taken_to_visible_ms),
            mean_taken_to_visible_ms=_round(self._taken_sum_ms / self.probes) if self.probes else None,
            last_publish_to_visible_ms=_round(self.last_publish_to_visible_ms),
            mean_publish_to_visible_ms=(
                _round(self._published_sum_ms / self._published_probes) if self._published_probes else None
            ),
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


async def wait_visible_through(proxy: Any, collection: str, collection_id: int, ts: int, timeout_s: float) -> None:
    """A ``count(*)`` of collection ``collection_id`` (named ``collection`` in the request) at
    guarantee timestamp ``ts`` through ``proxy``'s read path (returns once every shard's tsafe
    reached ``ts``). Raises if the collection no longer exists or is another one under its name
    (dropped and re-created since), or the read fails."""
    desc = await proxy.cache.get_by_id(collection_id)
    info = desc.info
    query = QueryParams.of(
        info.collection_name,
        output_fields=["count(*)"],
        guarantee_timestamp=ts,
        timeout=timeout_s,
        db_name=desc.db_name,
        internal=True,
    )
    if (await proxy.cache.resolve(info.collection_name, desc.db_name)).collection_id != collection_id:
        raise CollectionNotFound(f"{collection} is now another collection than {collection_id}")
    await proxy.query(query)

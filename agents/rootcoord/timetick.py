"""The rootcoord's time-tick agent (Milvus's timetickSync): per pchannel, the minimum over the live
proxies of their latest reported tick, written as a :class:`TimeTickEvent` into that dml partition.

Contract: every event on a dml partition with ``ts < tick`` precedes the TimeTick ``tick`` on that
partition. Why it holds:

- A proxy reports ``t`` for pchannel ``p`` (``ProxyTimeTick``, on ``proxy-tt``) only after every DML
  event of its own on ``p`` with a timestamp below ``t`` was acknowledged by the broker (acks=all),
  so those events are on the partition before any tick written later.
- The agent writes, per pchannel, the minimum over the *live* proxies (node registry, role
  ``proxy``) of their latest reports. A live proxy that has not reported ``p`` holds ``p``: no tick.
- With no live proxy at all, every pchannel advances to ``tso_now``. The TSO is read *before* the
  registry, so a proxy missing from that registry read registers after ``tso_now`` was issued; a
  proxy registers before it takes any DML timestamp, so all its timestamps exceed ``tso_now``.
- A live proxy whose quiet flag is set (``state/meta/quiet_proxies.py``) counts as having reported
  ``tso_now``: the flags are read after ``tso_now``, and a proxy sets its flag only with nothing in
  flight and clears it before it takes its next DML timestamp, so a flag seen set means all its
  DML below ``tso_now`` is on the log and all its later DML is above ``tso_now``.
- A proxy whose lease expired is dead: its reports are dropped. This rests on the lease (as
  Milvus's rests on its session): a proxy that lost its lease must stop writing DML.

Ticks per partition are strictly increasing: a tick ``<=`` the last one written for that pchannel is
skipped. The last ticks are saved in Redis (``<cluster>:timetick``) *before* they are sent, so a
restarted rootcoord, whose proxy-tt consumer may resume from an older committed offset (reports
lower than those it used before), never writes a tick below or equal to one it may have written.
A tick is only a lower bound, so skipping a round (errors, nothing advanced) is always safe.

Pace: a round runs on every report, and otherwise every ``time_tick_interval_ms`` while some
live proxy is not quiet, every ``time_tick_idle_interval_ms`` while all are (or none is live). A
quiet proxy reports at the idle pace too, so an idle stack sends a tick per second, not twenty;
a Strong read or a write makes its proxy report at once, which starts a round at once.

Only pchannels in use (some collection's vchannel maps to them) get ticks, as Milvus's rootcoord
sends ticks to the dml channels collections hold: an unused pchannel has no reader, and ticking
all of them (16 x 20/s by default) costs every process CPU for nothing. A pchannel that comes into
use gets the current minimum at the next round, above anything written before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from agents.service import OnCrash, Service
from schemas.codec import decode, encode
from schemas.config import OspreyConfig
from schemas.dml import ProxyTimeTick, TimeTickEvent
from schemas.status import TimeTickHealth
from state.meta.quiet_proxies import QuietProxies
from state.meta.registry import NodeRegistry
from state.meta.timetick_checkpoint import TimeTickCheckpoint
from state.meta.tso import TimestampOracle
from streams.channels import pchannel_name, pchannel_partition
from streams.topics import Topics

log = logging.getLogger(__name__)

PROXY_ROLE = "proxy"
BACKOFF_MIN_S = 0.1  # first pause after a failed round
BACKOFF_MAX_S = 2.0  # pauses double up to this while rounds keep failing


class TimeTickSync:
    """Pure logic of the time-tick agent over a fixed set of pchannels.

    ``feed`` keeps per (proxy, pchannel) the highest tick reported (a lower, later report is stale
    and ignored); ``ticks(live, tso_now)`` is per pchannel the minimum over the live proxies of
    those ticks (absent = held) and drops the reports of proxies not live; ``advanced`` keeps the
    ticks above the last published ones and ``mark_published`` records what was published.
    """

    def __init__(self, pchannels: Iterable[str]) -> None:
        self.pchannels: tuple[str, ...] = tuple(pchannels)
        self._known = frozenset(self.pchannels)
        self._reports: dict[int, dict[str, int]] = {}
        self.last_published: dict[str, int] = {}
        self.unknown_pchannels = 0  # report entries naming a pchannel outside the set (ignored)

    def feed(self, report: ProxyTimeTick) -> None:
        """Take one proxy report; per pchannel, ticks never go back."""
        held = self._reports.setdefault(report.proxy_id, {})
        for pchannel, ts in report.ticks.items():
            if pchannel not in self._known:
                self.unknown_pchannels += 1
                continue
            if ts > held.get(pchannel, 0):
                held[pchannel] = ts

    def ticks(self, live_proxies: set[int], tso_now: int, quiet: Collection[int] = ()) -> dict[str, int]:
        """Per pchannel the minimum over ``live_proxies`` of their latest reports, a ``quiet`` one
        counting as having reported ``tso_now``; a pchannel that some live, not quiet proxy has not
        reported is absent (held). With every live proxy quiet, or none live, every pchannel gets
        ``tso_now`` (which must be read before the liveness and the quiet flags). Reports of
        proxies not live are dropped."""
        for proxy_id in [p for p in self._reports if p not in live_proxies]:
            del self._reports[proxy_id]
        reporting = [p for p in live_proxies if p not in quiet]
        floor = [tso_now] if len(reporting) < len(live_proxies) or not live_proxies else []
        out: dict[str, int] = {}
        for pchannel in self.pchannels:
            values = [self._reports.get(proxy_id, {}).get(pchannel) for proxy_id in reporting]
            if all(v is not None for v in values):
                out[pchannel] = min([*floor, *(v for v in values if v is not None)])
        return out

    def advanced(self, ticks: dict[str, int]) -> dict[str, int]:
        """The entries of ``ticks`` strictly above the last published tick of their pchannel."""
        return {p: ts for p, ts in ticks.items() if ts > self.last_published.get(p, 0)}

    def mark_published(self, ticks: dict[str, int]) -> None:
        """Record ``ticks`` as published (the last published tick never goes back)."""
        for pchannel, ts in ticks.items():
            if ts > self.last_published.get(pchannel, 0):
                self.last_published[pchannel] = ts

    def reports_held(self) -> dict[int, dict[str, int]]:
        """A copy of the latest tick per proxy and pchannel."""
        return {proxy_id: dict(ticks) for proxy_id, ticks in self._reports.items()}


class TimeTickAgent(Service):
    """The runtime part: ``feed`` takes raw proxy-tt records; a background task runs
    :meth:`publish_once` (TSO now, then live proxies, then the advanced ticks saved to Redis and
    written, acks=all, into their dml partitions) as soon as a report arrives, and at least every
    ``config.time_tick_interval_ms`` (so ticks advance from the TSO with no proxy). Running on
    arrival rather than on a timer of its own saves up to one interval of tick latency (the time
    from a proxy's report to the delegators' tsafe), which is what Strong reads wait for.

    A failed round (Redis, Kafka) is logged and retried after a backoff; the loop only ends on
    ``stop``. ``start``/``stop`` are safe to call twice (a :class:`agents.service.Service`).
    """

    def __init__(
        self,
        config: OspreyConfig,
        redis: aioredis.Redis,
        tso: TimestampOracle,
        registry: NodeRegistry,
        producer: AIOKafkaProducer,
        in_use: Callable[[], Collection[str]] | None = None,
    ) -> None:
        """``in_use``: the pchannels that get ticks (None: all of them)."""
        super().__init__()
        self.config = config
        self._in_use = in_use
        self.topic = Topics.of(config).dml
        self.checkpoint = TimeTickCheckpoint(redis, config.cluster)
        self.sync = TimeTickSync(pchannel_name(self.topic, i) for i in range(config.dml_partitions))
        self._tso = tso
        self._registry = registry
        self._producer = producer
        self._interval_s = config.time_tick_interval_ms / 1000
        self._idle_s = config.time_tick_idle_ms / 1000
        self._quiet = QuietProxies(redis, config.cluster)
        self._quiet_ids: set[int] = set()
        self._stopping = False
        self._restored = False
        self._live: set[int] = set()
        self._fed = asyncio.Event()
        self._rounds = 0
        self._events_published = 0
        self._errors = 0
        self._bad_reports = 0
        self._last_error: str | None = None
        self._last_round_at: float | None = None

    service_name = "rootcoord time tick"

    async def on_start(self) -> None:
        self._stopping = False
        # RESTART: a round starts from the TSO, the live proxies and the ticks published (never
        # lower than the checkpoint), so a new loop ticks on from where the last one was
        self.spawn(self._run, "rootcoord-time-tick", on_crash=OnCrash.RESTART)

    async def on_stop(self) -> None:
        self._stopping = True  # ends the loop even if a library swallows the cancellation

    def feed(self, value: bytes) -> None:
        """Take one raw proxy-tt record (``encode(ProxyTimeTick)``); a malformed one is logged and skipped."""
        try:
            report = decode(value, ProxyTimeTick)
        except Exception as err:  # a malformed record must not stop the agent
            self._bad_reports += 1
            log.warning("time tick: skipping a malformed proxy-tt record (%s)", err)
            return
        self.sync.feed(report)
        self._fed.set()

    async def publish_once(self) -> dict[str, int]:
        """One round; returns the ticks written (pchannel -> ts). Raises on Redis/Kafka errors."""
        if not self._restored:
            saved = await self.checkpoint.load()
            self.sync.mark_published({p: ts for p, ts in saved.items() if p in self.sync.pchannels})
            self._restored = True
        tso_now = await self._tso.now()  # before the liveness and quiet reads: see the module docstring
        live = set(await self._registry.alive(PROXY_ROLE))
        quiet = await self._quiet.which(live)
        self._live, self._quiet_ids = live, quiet
        advanced = self.sync.advanced(self.sync.ticks(live, tso_now, quiet))
        if self._in_use is not None:
            wanted = set(self._in_use())
            advanced = {p: ts for p, ts in advanced.items() if p in wanted}
        if advanced:
            await self.checkpoint.save(advanced)
            self.sync.mark_published(advanced)
            futures = [
                await self._producer.send(
                    self.topic, encode(TimeTickEvent(pchannel=p, ts=ts)), partition=pchannel_partition(p)
                )
                for p, ts in advanced.items()
            ]
            failures = [
                r for r in await asyncio.gather(*futures, return_exceptions=True) if isinstance(r, BaseException)
            ]
            self._events_published += len(advanced) - len(failures)
            if failures:
                raise failures[0]
        self._rounds += 1
        self._last_round_at = time.monotonic()
        return advanced

    async def _run(self) -> None:
        backoff_s = BACKOFF_MIN_S
        while not self._stopping:
            started = time.monotonic()
            self._fed.clear()
            try:
                await self.publish_once()
            except Exception as err:  # transient Redis/Kafka trouble must not end the ticker
                self._errors += 1
                self._last_error = repr(err)
                first = backoff_s == BACKOFF_MIN_S  # full traceback once per failing streak
                log.warning("time tick: round failed (%r); retrying in %.1fs", err, backoff_s, exc_info=first)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
                continue
            backoff_s = BACKOFF_MIN_S
            interval_s = self._idle_s if self._live <= self._quiet_ids else self._interval_s
            with contextlib.suppress(TimeoutError):  # the next report, or the interval
                async with asyncio.timeout(max(0.0, interval_s - (time.monotonic() - started))):
                    await self._fed.wait()

    def health(self) -> TimeTickHealth:
        since = None if self._last_round_at is None else round(time.monotonic() - self._last_round_at, 3)
        return TimeTickHealth(
            **dict(super().health()),
            running=self.loops_running > 0,
            interval_ms=self.config.time_tick_interval_ms,
            last_published=dict(self.sync.last_published),
            live_proxies=sorted(self._live),
            quiet_proxies=sorted(self._quiet_ids),
            idle_interval_ms=self.config.time_tick_idle_ms,
            reports_held=self.sync.reports_held(),
            rounds=self._rounds,
            events_published=self._events_published,
            since_last_round_s=since,
            errors=self._errors,
            last_error=self._last_error,
            malformed_reports=self._bad_reports,
            unknown_pchannels=self.sync.unknown_pchannels,
        )

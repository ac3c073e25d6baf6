"""TimeTickSync, the pure part of the rootcoord's time-tick agent: min over live proxies, holding,
dead proxies, the TSO fallback with no live proxy, monotonic publication, stale reports. Then
TimeTickAgent's loop with stand-ins: failed rounds, ticks saved before a restart, bad reports."""

from __future__ import annotations

import asyncio

from redis.exceptions import ConnectionError as RedisConnectionError

from agents.rootcoord.timetick import TimeTickAgent, TimeTickSync
from schemas.codec import decode, encode
from schemas.config import OspreyConfig
from schemas.dml import DML_EVENT, ProxyTimeTick, TimeTickEvent
from state.meta.tso import ts_from_ms as ts
from tests.eventually import eventually

A, B, C = "c.dml_0", "c.dml_1", "c.dml_2"
NOW = ts(5_000)  # the TSO's "now" in every round below unless said otherwise


def report(proxy_id: int, **ticks_ms: int) -> ProxyTimeTick:
    """A report with ticks given in ms by partition index: ``report(1, p0=100)``."""
    return ProxyTimeTick(proxy_id=proxy_id, ticks={f"c.dml_{k[1:]}": ts(v) for k, v in ticks_ms.items()})


def sync() -> TimeTickSync:
    return TimeTickSync([A, B, C])


def test_tick_is_the_min_over_live_proxies_per_pchannel() -> None:
    s = sync()
    s.feed(report(1, p0=100, p1=300, p2=500))
    s.feed(report(2, p0=200, p1=250, p2=500))
    assert s.ticks({1, 2}, NOW) == {A: ts(100), B: ts(250), C: ts(500)}


def test_a_quiet_proxy_counts_as_the_tso_now_and_holds_nothing() -> None:
    s = sync()
    s.feed(report(1, p0=100, p1=300, p2=500))
    s.feed(report(2, p0=50))  # proxy 2's old report, before it went quiet
    assert s.ticks({1, 2}, NOW, quiet={2}) == {A: ts(100), B: ts(300), C: ts(500)}
    assert s.ticks({1, 2, 3}, NOW, quiet={2, 3}) == {A: ts(100), B: ts(300), C: ts(500)}  # 3 never reported
    # every live proxy quiet: the TSO's now everywhere, as with no live proxy
    assert s.ticks({1, 2}, NOW, quiet={1, 2}) == {A: NOW, B: NOW, C: NOW}
    # the quiet flag of a proxy that is not live changes nothing
    assert s.ticks({1}, NOW, quiet={7}) == {A: ts(100), B: ts(300), C: ts(500)}
    # a reporting proxy's tick above the TSO read (it cannot happen: reports precede the read) is capped
    s.feed(report(1, p0=9_000))
    assert s.ticks({1, 2}, NOW, quiet={2})[A] == NOW


def test_a_live_proxy_without_a_report_holds_the_pchannel() -> None:
    s = sync()
    s.feed(report(1, p0=100, p1=300, p2=500))
    s.feed(report(2, p0=200))  # proxy 2 has not reported B and C yet
    assert s.ticks({1, 2}, NOW) == {A: ts(100)}
    assert s.ticks({1, 2, 3}, NOW) == {}  # proxy 3 is live and reported nothing: everything held


def test_reports_of_dead_proxies_are_dropped() -> None:
    s = sync()
    s.feed(report(1, p0=100, p1=100, p2=100))
    s.feed(report(2, p0=900, p1=900, p2=900))
    assert s.ticks({2}, NOW) == {A: ts(900), B: ts(900), C: ts(900)}  # proxy 1 died: it no longer holds
    assert 1 not in s.reports_held()
    # proxy 1 cannot come back under its id with its old reports: they are gone
    assert s.ticks({1, 2}, NOW) == {}


def test_no_live_proxy_advances_every_pchannel_to_the_tso() -> None:
    s = sync()
    assert s.ticks(set(), NOW) == {A: NOW, B: NOW, C: NOW}
    s.feed(report(1, p0=100, p1=100, p2=100))  # a report of a proxy that is not live
    assert s.ticks(set(), NOW) == {A: NOW, B: NOW, C: NOW}
    assert s.reports_held() == {}


def test_publication_is_strictly_monotonic_per_pchannel() -> None:
    s = sync()
    first = s.advanced(s.ticks(set(), NOW))
    assert first == {A: NOW, B: NOW, C: NOW}
    s.mark_published(first)
    assert s.advanced(s.ticks(set(), NOW)) == {}  # equal: not published again
    # a new proxy whose reports are below what was published: skipped until they pass it
    s.feed(report(7, p0=4_000, p1=6_000, p2=5_000))
    assert s.advanced(s.ticks({7}, ts(9_000))) == {B: ts(6_000)}
    s.mark_published({B: ts(6_000)})
    s.mark_published({B: ts(5_500)})  # recording a lower tick never moves the last one back
    assert s.last_published == {A: NOW, B: ts(6_000), C: NOW}
    s.feed(report(7, p0=7_000, p1=7_000, p2=7_000))
    assert s.advanced(s.ticks({7}, ts(9_000))) == {A: ts(7_000), B: ts(7_000), C: ts(7_000)}


def test_out_of_order_reports_never_move_a_tick_back() -> None:
    s = sync()
    s.feed(report(1, p0=300, p1=300))
    s.feed(report(1, p0=200, p1=400, p2=100))  # p0 stale (ignored), p1 newer, p2 first report
    assert s.reports_held() == {1: {A: ts(300), B: ts(400), C: ts(100)}}
    assert s.ticks({1}, NOW) == {A: ts(300), B: ts(400), C: ts(100)}


def test_reports_naming_unknown_pchannels_are_ignored() -> None:
    s = sync()
    s.feed(ProxyTimeTick(proxy_id=1, ticks={A: ts(1), "other.dml_9": ts(2)}))
    assert s.reports_held() == {1: {A: ts(1)}}
    assert s.unknown_pchannels == 1


# -- TimeTickAgent's loop with stand-ins for Redis, the TSO, the registry and the producer


class _Redis:
    def __init__(self, saved: dict[bytes, bytes] | None = None) -> None:
        self.hash: dict[bytes, bytes] = dict(saved or {})

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        return dict(self.hash)

    async def hset(self, key: str, mapping: dict[str, str]) -> int:
        self.hash.update({k.encode(): v.encode() for k, v in mapping.items()})
        return len(mapping)


class _Tso:
    def __init__(self, fail_first: int) -> None:
        self.ms = 10_000
        self.fail_first = fail_first

    async def now(self) -> int:
        if self.fail_first:
            self.fail_first -= 1
            raise RedisConnectionError("redis restarting")
        self.ms += 1
        return ts(self.ms)


class _Registry:
    async def alive(self, role: str) -> dict[int, dict[str, object]]:
        assert role == "proxy"
        return {}


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, TimeTickEvent]] = []

    async def send(self, topic: str, value: bytes, partition: int) -> asyncio.Future[None]:
        self.sent.append((topic, partition, decode(value, DML_EVENT)))  # type: ignore[arg-type]
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


def _agent(redis: _Redis, tso: _Tso, producer: _Producer) -> TimeTickAgent:
    config = OspreyConfig(
        cluster="c", dml_partitions=3, time_tick_interval_ms=5, time_tick_idle_interval_ms=5, kafka="127.0.0.1:1"
    )
    return TimeTickAgent(config, redis, tso, _Registry(), producer)  # type: ignore[arg-type]


async def test_agent_survives_failed_rounds_and_publishes_into_every_partition() -> None:
    producer = _Producer()
    agent = _agent(_Redis(), _Tso(fail_first=2), producer)
    await agent.start()
    await eventually("nine ticks published", lambda: len(producer.sent) >= 9, poll_s=0.01)
    await agent.stop()
    await agent.stop()  # twice is fine
    assert agent.health().errors == 2 and not agent.health().running
    by_partition: dict[int, list[int]] = {}
    for topic, partition, event in producer.sent:
        assert topic == "c.dml" and event.pchannel == f"c.dml_{partition}"
        by_partition.setdefault(partition, []).append(event.ts)
    assert sorted(by_partition) == [0, 1, 2]
    assert all(len(v) >= 3 and v == sorted(set(v)) for v in by_partition.values())


async def test_agent_never_publishes_at_or_below_ticks_saved_before_a_restart() -> None:
    saved = {b"c.dml_0": str(ts(10_002)).encode(), b"c.dml_1": str(ts(1)).encode(), b"other.dml_0": b"7"}
    redis, producer = _Redis(saved), _Producer()
    agent = _agent(redis, _Tso(fail_first=0), producer)
    assert await agent.publish_once() == {"c.dml_1": ts(10_001), "c.dml_2": ts(10_001)}  # dml_0 skipped
    assert await agent.publish_once() == {"c.dml_1": ts(10_002), "c.dml_2": ts(10_002)}
    assert await agent.publish_once() == {"c.dml_0": ts(10_003), "c.dml_1": ts(10_003), "c.dml_2": ts(10_003)}
    assert redis.hash[b"c.dml_0"] == str(ts(10_003)).encode()  # saved before it was sent


def test_agent_skips_malformed_reports() -> None:
    agent = _agent(_Redis(), _Tso(fail_first=0), _Producer())
    agent.feed(b"not an event")
    agent.feed(encode(ProxyTimeTick(proxy_id=3, ticks={"c.dml_0": ts(5)})))
    assert agent.health().malformed_reports == 1
    assert agent.sync.reports_held() == {3: {"c.dml_0": ts(5)}}

"""The dq router (seed 001's query path to the shards): one read request out to the query nodes
that own its shards, one result per vchannel back.

:meth:`DqRouter.run` sends a checked request covering every shard either directly (TCP to each
owning query node's direct server, or a plain call when that server runs in this process, picking
per shard the least busy replica and failing over to another one, seed 002's shard leaders) or
through the ``dq-request`` topic, answered on ``dq-result``. It knows nothing of what a search or a
query is: the read tasks (:mod:`agents.proxy.search`) prepare the request and reduce the results.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from schemas.codec import encode
from schemas.config import OspreyConfig
from schemas.dq import QueryRequest, QueryResult, SearchRequest, SearchResult
from schemas.errors import OspreyError, RequestTimeout, from_error_status
from schemas.meta import CollectionInfo
from schemas.status import DqRouterHealth
from state.meta.shard_owners import ShardOwner, ShardOwners
from streams.direct import DirectPool
from streams.topics import Topics

__all__ = ["DqRouter", "Result"]

RETRY_PAUSE_S = 0.05  # pause before asking again for a shard whose owner is unknown or moving
ROUTER_SLACK_S = 1.0  # the proxy waits this much longer than a delegator may wait for tsafe
SUSPECT_FAILOVERS = 5  # a node that failed a request is asked last for this many replica_failover_s
TOPIC_OWNER_CHECK_S = 0.5  # topic path: how often a waiting request checks for shards that changed owner

Result = SearchResult | QueryResult


@dataclass
class _Collector:
    expected: set[str]
    results: dict[str, Result] = field(default_factory=dict)
    error: Result | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, result: Result) -> None:
        if not result.vchannel:
            self.error = result
            self.done.set()
        elif result.vchannel in self.expected and result.vchannel not in self.results:
            self.results[result.vchannel] = result
            if len(self.results) == len(self.expected):
                self.done.set()


class DqRouter:
    """Gets one result per vchannel of a request, by the configured path (``dq_path``)."""

    def __init__(
        self,
        config: OspreyConfig,
        topics: Topics,
        producer: Any,
        shard_owners: ShardOwners,
        direct: DirectPool,
        proxy_id: int,
    ) -> None:
        self.config = config
        self.topics = topics
        self.producer = producer  # aiokafka's AIOKafkaProducer, started by the proxy
        self.shard_owners = shard_owners
        self.direct = direct
        self.proxy_id = proxy_id
        self._owners: dict[int, dict[str, ShardOwner]] = {}  # replica group -> pchannel -> owner
        self._owners_at = float("-inf")
        self._collectors: dict[int, _Collector] = {}
        self._outstanding: dict[str, int] = {}  # query node address -> requests sent, not answered
        # query node address -> until when (monotonic s) it is asked last: it failed or did not answer
        self._suspect: dict[str, float] = {}
        self._turn = 0  # breaks ties between equally busy replicas in turn
        self.failovers = 0

    @property
    def origin(self) -> str:
        return f"proxy-{self.proxy_id}"

    async def run(self, request: SearchRequest | QueryRequest, info: CollectionInfo, replicas: int = 1) -> list[Result]:
        """One result per vchannel of ``info``; ``replicas``: the replica groups that serve the
        collection (0 .. replicas-1, ``schemas/distribution.py``)."""
        deadline = time.monotonic() + request.timeout_ms / 1000 + ROUTER_SLACK_S
        if self.config.dq_path == "topic":
            results = await self._via_topic(request, info, deadline)
        else:
            results = await self._direct(request, info, deadline, max(1, replicas))
        return [results[v] for v in info.vchannels]

    # -- direct path

    async def _owner_map(self, refresh: bool) -> dict[int, dict[str, ShardOwner]]:
        if refresh or time.monotonic() - self._owners_at > self.config.shard_owners_ttl_s:
            self._owners = await self.shard_owners.groups()
            self._owners_at = time.monotonic()
        return self._owners

    def _pick(
        self, owners: dict[int, dict[str, ShardOwner]], pchannel: str, replicas: int, tried: set[str]
    ) -> ShardOwner | None:
        """The leader of ``pchannel`` in the replica with the fewest outstanding requests, among
        the first ``replicas`` groups and those not ``tried`` by this request yet (ties in turn);
        a leader that failed a request lately (``SUSPECT_FAILOVERS`` times ``replica_failover_s``)
        comes after the others."""
        candidates = [
            owner
            for group in range(replicas)
            if (owner := owners.get(group, {}).get(pchannel)) is not None and owner.address not in tried
        ]
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        self._turn += 1
        n = len(candidates)
        now = time.monotonic()
        return min(
            enumerate(candidates),
            key=lambda ic: (
                self._suspect.get(ic[1].address, 0.0) > now,
                self._outstanding.get(ic[1].address, 0),
                (ic[0] - self._turn) % n,
            ),
        )[1]

    async def _direct(
        self, request: SearchRequest | QueryRequest, info: CollectionInfo, deadline: float, replicas: int
    ) -> dict[str, Result]:
        """Each vchannel asked of one replica's leader; a leader that fails, does not answer within
        ``replica_failover_s`` while another replica could, or answers ``moved`` is not asked for
        that vchannel again by this request while another replica's leader is left (failover)."""
        pending = list(info.vchannels)
        results: dict[str, Result] = {}
        tried: dict[str, set[str]] = {v: set() for v in info.vchannels}  # vchannel -> addresses that failed it
        refresh = False
        last_error = ""
        while pending:
            owners = await self._owner_map(refresh)
            by_address: dict[str, list[str]] = {}
            alternatives = False
            for vchannel in pending:
                pchannel = info.pchannels[info.vchannels.index(vchannel)]
                owner = self._pick(owners, pchannel, replicas, tried[vchannel])
                if owner is None and tried[vchannel]:  # every replica tried: all of them again
                    tried[vchannel].clear()
                    owner = self._pick(owners, pchannel, replicas, tried[vchannel])
                if owner is not None:
                    by_address.setdefault(owner.address, []).append(vchannel)
                    alternatives = alternatives or (
                        replicas > 1 and self._pick(owners, pchannel, replicas, {owner.address}) is not None
                    )
            attempt_deadline = (
                min(deadline, time.monotonic() + self.config.replica_failover_s) if alternatives else deadline
            )
            addresses = list(by_address)
            calls = [
                self._call(address, _addressed(request, by_address[address], info), attempt_deadline)
                for address in addresses
            ]
            outcomes = (
                await asyncio.gather(*calls, return_exceptions=True) if len(calls) != 1 else [await _caught(calls[0])]
            )
            for address, outcome in zip(addresses, outcomes, strict=True):
                if isinstance(outcome, OspreyError):
                    last_error = outcome.reason
                    for vchannel in by_address[address]:
                        tried[vchannel].add(address)
                    self.failovers += 1
                    self._suspect[address] = time.monotonic() + SUSPECT_FAILOVERS * self.config.replica_failover_s
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                self._suspect.pop(address, None)
                for result in outcome:
                    if not result.vchannel:  # the whole request was refused
                        raise from_error_status(result)
                    if result.moved:
                        last_error = result.reason  # not (or no longer) its owner: ask the new one
                        tried[result.vchannel].add(address)
                        continue
                    results[result.vchannel] = result
            pending = [v for v in info.vchannels if v not in results]
            if pending:
                if time.monotonic() >= deadline:
                    raise RequestTimeout(
                        f"no query node answered for vchannels {pending} of collection "
                        f"{info.collection_name} in time; last error: {last_error or 'none serves them'}"
                    )
                refresh = True
                if all(
                    self._pick(owners, info.pchannels[info.vchannels.index(v)], replicas, tried[v]) is None
                    for v in pending
                ):
                    await asyncio.sleep(RETRY_PAUSE_S)  # no replica left to fail over to: wait for a new owner
        return results

    async def _call(self, address: str, request: SearchRequest | QueryRequest, deadline: float) -> list[Result]:
        self._outstanding[address] = self._outstanding.get(address, 0) + 1
        try:
            timeout_s = max(0.001, deadline - time.monotonic())
            local = self.direct.local(address)  # a query node of this process: no socket, no codec
            if local is not None:
                batch = await local.call(request, timeout_s)
            else:
                batch = await (await self.direct.get(address)).call(request, timeout_s)
            return list(batch.results)
        finally:
            self._outstanding[address] -= 1

    # -- topic path

    async def _via_topic(
        self, request: SearchRequest | QueryRequest, info: CollectionInfo, deadline: float
    ) -> dict[str, Result]:
        """Publish on dq-request and collect one result per vchannel from dq-result. Only the owner
        of a shard answers for it, so a shard whose owner changes while the request is out (a
        rebalance, a querynode just starting) would never answer: such vchannels are asked again,
        in a request naming just them, whenever the pchannel owner map shows a new owner."""
        request = request.model_copy(update={"origin": self.origin, "vchannels": []})
        collector = _Collector(set(info.vchannels))
        self._collectors[request.request_id] = collector
        pchannel_of = dict(zip(info.vchannels, info.pchannels, strict=False))
        try:
            asked = (await self._owner_map(refresh=True)).get(0, {})
            await self._publish(request)
            while not collector.done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(collector.expected - set(collector.results))
                    raise RequestTimeout(
                        f"no result on {self.topics.dq_result} for vchannels {missing} of "
                        f"collection {info.collection_name} (request_id={request.request_id}); "
                        "is a querynode running? see ./osprey status"
                    )
                try:
                    async with asyncio.timeout(min(left, TOPIC_OWNER_CHECK_S)):
                        await collector.done.wait()
                except TimeoutError:
                    owners = (await self._owner_map(refresh=True)).get(0, {})
                    moved = [
                        v
                        for v in sorted(collector.expected - set(collector.results))
                        if owners.get(pchannel_of[v]) is not None
                        and owners.get(pchannel_of[v]) != asked.get(pchannel_of[v])
                    ]
                    if moved:
                        asked = owners
                        await self._publish(request.model_copy(update={"vchannels": moved}))
        finally:
            self._collectors.pop(request.request_id, None)
        if collector.error is not None:
            raise from_error_status(collector.error)
        return collector.results

    async def _publish(self, request: SearchRequest | QueryRequest) -> None:
        await self.producer.send_and_wait(self.topics.dq_request, encode(request), key=self.origin.encode())

    def on_result(self, result: Result) -> None:
        """A result read from dq-result (the proxy's router calls this)."""
        if result.origin == self.origin:
            collector = self._collectors.get(result.request_id)
            if collector is not None:
                collector.add(result)

    def health(self) -> DqRouterHealth:
        return DqRouterHealth(
            path=self.config.dq_path,
            waiting=len(self._collectors),
            owners=sum(len(g) for g in self._owners.values()),
            replica_groups=len(self._owners),
            failovers=self.failovers,
        )


def _addressed(
    request: SearchRequest | QueryRequest, vchannels: list[str], info: CollectionInfo
) -> SearchRequest | QueryRequest:
    """``request`` for ``vchannels``: as it is when it already asks for every shard and they are
    all of them (one query node serves the collection: no copy), else a copy naming them."""
    if not request.vchannels and len(vchannels) == len(info.vchannels):
        return request
    return request.model_copy(update={"vchannels": vchannels})


async def _caught(call: Awaitable[list[Result]]) -> list[Result] | BaseException:
    """``call``'s result or its exception, as ``gather(..., return_exceptions=True)`` gives (without a task)."""
    try:
        return await call
    except Exception as exc:
        return exc

"""The one way Osprey opens its meta store: an asyncio Redis client with bytes responses.

Every ``state`` class receives such a client (never a module-level singleton) plus the cluster
prefix, so several clusters and tests share one redis-server without meeting.

The client retries a command on ``ConnectionError``/``TimeoutError`` (reconnecting, with
exponential backoff), so a redis-server restart costs callers a pause, not an exception; clients
built by ``Redis.from_url`` alone do not retry. A retried command may have run once already:
every ``state`` script is safe to repeat (the TSO and id allocators skip values, a snapshot write
retried with its old timestamp is refused and redone at a fresh one, leases are token-checked).
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from schemas.config import OspreyConfig

RETRY_ATTEMPTS = 8
RETRY_BACKOFF_BASE_S = 0.05
RETRY_BACKOFF_CAP_S = 1.0


def connect(config: OspreyConfig) -> aioredis.Redis:
    """A client for ``config.redis`` returning ``bytes`` (``decode_responses=False``).

    The caller owns it and closes it with ``await client.aclose()``.
    """
    retry = Retry(ExponentialWithJitterBackoff(base=RETRY_BACKOFF_BASE_S, cap=RETRY_BACKOFF_CAP_S), RETRY_ATTEMPTS)
    return aioredis.Redis.from_url(config.redis, decode_responses=False, retry=retry)

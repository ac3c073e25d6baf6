"""The rootcoord's record of what it has processed from ``dd``, kept in one Redis hash.

Fields: ``position`` (offset of the last processed dd event), and per publisher
``last:<proxy_id>`` (its last processed request id) with ``reply:<proxy_id>`` (the reply sent for
it). A meta change writes these fields in the same atomic step as the meta (see SnapshotKV's
``side_hash``), so after a crash an event is either fully applied and recorded, or neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from schemas import ddl


@dataclass
class DdCheckpoint:
    """In-memory copy of the checkpoint hash; ``fields_for`` builds the fields one event writes."""

    redis: aioredis.Redis
    namespace: str
    position: int = -1
    last_request: dict[int, int] = field(default_factory=dict)
    last_reply: dict[int, str] = field(default_factory=dict)

    @property
    def hash_name(self) -> str:
        return f"{self.namespace}:rootcoord:dd-checkpoint"

    async def load(self) -> None:
        raw = await self.redis.hgetall(self.hash_name)
        self.position, self.last_request, self.last_reply = -1, {}, {}
        self.remember({_text(k): _text(v) for k, v in raw.items()})

    @classmethod
    def fields_for(cls, offset: int, reply: ddl.DdlReply | None) -> dict[str, str]:
        fields = {"position": str(offset)}
        if reply is not None:
            fields[f"last:{reply.proxy_id}"] = str(reply.request_id)
            fields[f"reply:{reply.proxy_id}"] = reply.model_dump_json()
        return fields

    async def save(self, fields: dict[str, str]) -> None:
        """Write ``fields`` alone (an event that changed no meta)."""
        mapping: dict[FieldT, EncodableT] = {k: v for k, v in fields.items()}  # hset's Mapping key is invariant
        await self.redis.hset(self.hash_name, mapping=mapping)
        self.remember(fields)

    def remember(self, fields: dict[str, str]) -> None:
        """Mirror fields that were written (by ``save`` or together with a meta change)."""
        for key, value in fields.items():
            if key == "position":
                self.position = int(value)
            elif key.startswith("last:"):
                self.last_request[int(key[5:])] = int(value)
            elif key.startswith("reply:"):
                self.last_reply[int(key[6:])] = value


def _text(raw: bytes | str) -> str:
    """A hash field or value as text (the client returns bytes: no ``decode_responses``)."""
    return raw.decode() if isinstance(raw, bytes) else raw

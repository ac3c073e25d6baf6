"""Virtual and physical channels.

A pchannel is one partition of the ``dml`` topic, named ``<cluster>.dml_<partition>``. A collection
with S shards has vchannels ``<collection_id>_<shard>v``; each is mapped to one pchannel when the
collection is created (the least-loaded pchannel, lowest index on ties: deterministic given the meta).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def vchannel_name(collection_id: int, shard: int) -> str:
    return f"{collection_id}_{shard}v"


def pchannel_name(dml_topic: str, partition: int) -> str:
    return f"{dml_topic}_{partition}"


def pchannel_partition(pchannel: str) -> int:
    """The dml partition a pchannel name stands for."""
    return int(pchannel.rsplit("_", 1)[1])


def assign_pchannels(dml_topic: str, dml_partitions: int, shards_num: int, in_use: Iterable[str]) -> list[str]:
    """Pick a pchannel for each of ``shards_num`` new vchannels: least used first, lowest index on ties.

    ``in_use`` lists the pchannels of every live collection's vchannels (with repeats).
    """
    load = Counter(pchannel_partition(p) for p in in_use)
    chosen: list[str] = []
    for _ in range(shards_num):
        partition = min(range(dml_partitions), key=lambda i: (load[i], i))
        load[partition] += 1
        chosen.append(pchannel_name(dml_topic, partition))
    return chosen

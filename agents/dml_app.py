"""The Faust app of a process that keeps state from ``dml`` in a consumer group (the data node; the
query nodes follow the query distribution instead, ``agents/querynode/app.py``).

It consumes every dml partition the consumer group gives it, never commits offsets (its
checkpoints live in the meta store, ``streams/transport.py``), applies records through a node whose
:class:`agents.dml_cursor.DmlCursor` may ask for a seek, publish their status every
``STATUS_INTERVAL_S`` and stops its runtime on shutdown. :func:`make_dml_app` wires that once;
the runtime brings the node and what differs.

No seek is done from the assignment callback: a seek racing Faust's fetcher (which resumes on its
own) crashed it (aiokafka ``KeyError`` in ``fetched_records``). The node's cursor asks for the
seek from the agent instead, at the first record that comes from elsewhere.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import faust
from aiokafka.errors import IllegalStateError
from faust.types import TP

from agents.process import make_app
from schemas.config import OspreyConfig
from schemas.errors import ServiceUnavailable
from streams.topics import Topics

log = logging.getLogger(__name__)

STATUS_INTERVAL_S = 1.0


class DmlNode(Protocol):
    async def apply(self, partition: int, offset: int, raw: bytes) -> int | None: ...


class DmlRuntime(Protocol):
    """What :func:`make_dml_app` needs of a process's runtime (a :class:`agents.service.Service`)."""

    async def ready(self) -> Any: ...  # the node (a DmlNode), once started

    async def on_assigned(self, partitions: set[int]) -> Any: ...

    async def publish_status(self) -> None: ...

    async def stop(self) -> None: ...


def make_dml_app(config: OspreyConfig, role: str, runtime: DmlRuntime) -> faust.App:
    """The app of ``role``: the ``dml`` agent, the assignment signal, the status timer, the
    shutdown."""
    app = make_app(config, role)
    app.osprey_commit_offsets = False  # type: ignore[attr-defined]  # see module doc
    topics = Topics.of(config)
    dml_topic = app.topic(
        topics.dml, value_type=bytes, value_serializer="raw", key_serializer="raw", partitions=config.dml_partitions
    )

    @app.agent(dml_topic, name="dml")
    async def dml_agent(stream: faust.StreamT) -> None:
        node: DmlNode = await runtime.ready()
        async for event in stream.events():
            seek = await node.apply(event.message.partition, event.message.offset, event.value)
            if seek is not None:  # the consumer is not where the pchannel's cursor is (node.apply)
                await seek_to(event.message.tp, seek)

    async def seek_to(tp: TP, offset: int) -> None:
        try:
            await app.consumer.seek_wait({tp: offset})
        except (TimeoutError, IllegalStateError, ServiceUnavailable) as err:  # taken away meanwhile
            log.info("%s: no seek of %s (%r)", role, tp, err)

    # Faust's signal typing does not accept async receivers with keyword arguments.
    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(app: faust.App, assigned: set[Any], **_: object) -> None:
        await runtime.on_assigned({tp.partition for tp in assigned if tp.topic == topics.dml})

    @app.timer(STATUS_INTERVAL_S)
    async def status() -> None:
        try:
            await runtime.publish_status()
        except Exception as err:  # status is best effort
            log.warning("%s: status not published (%r)", role, err)

    # Faust's signal typing does not accept async receivers with keyword arguments.
    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def close(app: faust.App, **_: object) -> None:
        await runtime.stop()

    app.osprey_runtime = runtime  # type: ignore[attr-defined]
    return app

"""The data node (seed 001 §6.3, seed 002's sealed half): consumes ``dml`` in its own consumer
group, buffers inserts per segment (:class:`~agents.datanode.buffer.SegmentBuffer`), and flushes
each sealed segment to the object store once every row of it has been consumed
(:class:`~agents.datanode.node.DataNode`, :class:`~agents.datanode.flusher.SegmentFlusher`),
recording the channel checkpoints it recovers from.

May import: ``agents.service``/``agents.process``/``agents.ports``/``agents.dml_cursor``/
``agents.segment_events``/``agents.dml_app``, ``state``, ``streams``, ``schemas``; never
another agent.
"""

from __future__ import annotations

"""Arrow IPC streams: the form rows travel in as bytes (``IngestChunk.arrow``, ``DmlRequest.arrow``).

One writer for every producer of those bytes (the Spark sinks, the proxy's dead letters, tests),
so they all write the same format: an IPC *stream* (schema message, then record batches), not
the file format. The proxy reads them back with ``agents.proxy.arrow_checks.read_ipc``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ipc_stream"]


def ipc_stream(data: pa.Table | pa.RecordBatch) -> bytes:
    """``data`` (a table or one record batch) as the bytes of an Arrow IPC stream in its own schema."""
    import pyarrow as pa  # here, not at import: most importers of schemas never touch Arrow

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        if isinstance(data, pa.RecordBatch):
            writer.write_batch(data)
        else:
            writer.write_table(data)
    return bytes(sink.getvalue().to_pybytes())

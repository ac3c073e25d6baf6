"""Spark Structured Streaming into Osprey: the ``osprey`` sink (:mod:`spark_streaming.sink`), a
checked ``writeStream`` and a ``foreachBatch`` writer (:mod:`spark_streaming.stream`), a light
local session (:mod:`spark_streaming.session`) and jobs (:mod:`spark_streaming.jobs`). Spark tasks
talk to a running proxy over HTTP (:mod:`spark_streaming.ingest_client`).

May import: ``schemas`` (a Spark task ships nothing else).
"""

"""Spark Structured Streaming: the ``osprey`` streaming sink and ingest jobs (issue 4)."""

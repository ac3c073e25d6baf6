"""Spark jobs that feed Osprey (run with ``python -m spark_streaming.jobs.<name>``)."""

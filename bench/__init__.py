"""Benchmarks (``python -m bench.search``, ``bench.ingest``, ``bench.broker``): each starts its own
embedded stack, measures a reference in the same run and writes JSON plus a PNG to
``bench/results/``; recorded in docs/benchmarks.md.

May import: every Osprey package (like the tests, it sits above them all).
"""

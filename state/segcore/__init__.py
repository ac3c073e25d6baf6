"""Segment compute in process memory (Milvus's segcore): a segment's columns, MVCC visibility by
timestamp, brute-force and HNSW search, the interim index builder. No I/O.

May import: ``schemas``.
"""

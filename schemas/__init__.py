"""Pydantic models of every Osprey event, collection schema, stored meta record and setting,
the binary codec of those models, the configuration and the error table.

A model here is the single source of truth for what travels on a topic or sits in the meta store.

May import: the standard library and third-party packages only (no other Osprey package).
"""

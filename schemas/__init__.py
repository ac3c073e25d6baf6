"""Pydantic models of every Osprey event, collection schema, stored meta record and setting.

A model here is the single source of truth for what travels on a topic or sits in the meta store.
"""

"""The index coordinator (seed 004's IndexCoord): index build tasks for flushed segments, assigned
to index nodes by load, reassigned when a node's lease expires, files recycled. It runs inside the
rootcoord process (``agents/rootcoord/app.py``); nothing in it depends on that.

May import ``agents.service``, ``agents.segment_events``, ``state``, ``streams``, ``schemas``.
"""

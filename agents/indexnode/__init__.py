"""The index node process (seed 004's IndexNode): builds the index tasks the coordinator assigns.

May import ``agents.service``, ``agents.segment_events``, ``state``, ``streams``, ``schemas``;
never another agent.
"""

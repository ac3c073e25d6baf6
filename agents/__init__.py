"""The processes, one subpackage each: ``proxy`` (seed 001), ``rootcoord`` (DDL and the time tick)
and ``querynode`` (seed 002: delegators and workers); later datanode, indexcoord and indexnode.
Shared by all: ``service`` (the lifecycle), ``process`` (a Faust worker process's main) and
``ports`` (waiting for a dependency).

May import: ``state``, ``streams``, ``schemas``. An agent never imports another agent.
"""

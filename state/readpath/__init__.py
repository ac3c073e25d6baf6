"""The read path both the proxy and the query node run: guarantee timestamps from consistency
levels (``consistency``), search/query request checks (``dq_checks``), the filter language
(``expr``), top-k reduce (``reduce``) and the hit wire format (``search_hits``).

May import: ``state.meta``, ``state.segcore``, ``streams``, ``schemas``.
"""

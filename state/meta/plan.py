"""What one DDL event does to the meta: a :class:`Plan` (keys to save and remove, additions that
need the write's timestamp, and the reply once that timestamp is known). The rules that make plans
live in ``ddl_rules.py`` (collections, databases, aliases, indexes) and ``rbac_rules.py`` (users,
roles, grants, privilege groups); the rootcoord writes a plan in one atomic step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from schemas import ddl

NewId = Callable[[], Awaitable[int]]
Addition = Callable[[int], tuple[str, str]]


@dataclass
class Plan:
    """The meta change of one event. ``make_reply(ts)`` gets the write's timestamp (or, for a
    read or a change with no effect, the event's own timestamp)."""

    make_reply: Callable[[int], ddl.DdlReply]
    saves: dict[str, str] = field(default_factory=dict)
    removals: list[str] = field(default_factory=list)
    removal_prefixes: list[str] = field(default_factory=list)
    additions: list[Addition] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        return bool(self.saves or self.removals or self.removal_prefixes or self.additions)


__all__ = ["Addition", "NewId", "Plan"]

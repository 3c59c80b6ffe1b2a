"""The web view's versions: the page's sections, and each new version sent to every subscriber as the fragments
that differ from the last one (and a section's order when fragments come or go)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

Sections = dict[str, dict[str, str]]
"""section -> fragment id -> its HTML"""


@dataclass
class Update:
    version: int
    sections: dict[str, dict[str, Any]]  # section -> {"set": {id: html}, "order": [ids] | None}


@dataclass
class UpdateFeed:
    version: int = 0
    sections: Sections = field(default_factory=dict)
    _subscribers: set[asyncio.Queue[Update | None]] = field(default_factory=set)

    def publish(self, sections: Sections) -> None:
        """Make ``sections`` the current version, when they differ, and send the difference."""
        changes: dict[str, dict[str, Any]] = {}
        for name, fragments in sections.items():
            before = self.sections.get(name, {})
            changed = {k: v for k, v in fragments.items() if before.get(k) != v}
            order = list(fragments) if list(fragments) != list(before) else None
            if changed or order is not None:
                changes[name] = {"set": changed, "order": order}
        if not changes and self.version:
            return
        self.sections = sections
        self.version += 1
        update = Update(self.version, changes)
        for queue in list(self._subscribers):
            if queue.full():  # a slow reader: it gets everything afresh instead of the backlog
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)
            else:
                queue.put_nowait(update)

    def snapshot(self) -> Update:
        """Everything, as one update (a client that connects late or fell behind)."""
        return Update(
            self.version, {name: {"set": dict(f), "order": list(f)} for name, f in self.sections.items()}
        )

    @contextmanager
    def subscribe(self, backlog: int = 32) -> Iterator[asyncio.Queue[Update | None]]:
        """A queue of updates (None: start again from ``snapshot()``)."""
        queue: asyncio.Queue[Update | None] = asyncio.Queue(maxsize=backlog)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

"""What an explanation holds (pure data): the Event's reason code and sentences, the nodes nearest first with the
words for each, the closest devices, and the MIG planner's answer; plain values so the web view can serialise it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.allocator.diagnosis import Failure, NodesFailure
from gpudra.allocator.vocabulary import conjoin


@dataclass(frozen=True, slots=True)
class Repartition:
    """What the MIG planner says about the claim: the node whose MIG layout would serve it once repartitioned
    (the profiles it needs there and the steps per GPU), or why no repartition can."""

    node: str = ""
    profiles: tuple[tuple[str, int], ...] = ()
    steps: tuple[str, ...] = ()
    note: str = ""
    impossible: str = ""

    def sentence(self) -> str:
        wanted = conjoin([f"a {p}" if n == 1 else f"{n}x {p}" for p, n in self.profiles])
        how = "; ".join(self.steps) + (f"; {self.note}" if self.note else "")
        return f"would fit on {self.node} if its MIG layout had {wanted} free (the MIG planner can do this: {how})"


@dataclass(frozen=True, slots=True)
class ClosestDevice:
    node: str
    device: str
    kind: str
    miss: str


@dataclass(frozen=True, slots=True)
class NodeLine:
    """One node in ranking order: where it stands and, in words, what keeps the claim from it."""

    node: str
    tier: int
    reason: str
    need: int
    now: int
    later: int
    words: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a claim does not fit: the Event's reason code and sentences, nodes nearest first, closest devices."""

    reason: str
    headline: str
    sentences: tuple[str, ...]
    nodes: tuple[NodeLine, ...]
    closest: tuple[ClosestDevice, ...]
    outcome: Failure | NodesFailure

    def text(self, limit: int = 1024) -> str:
        """The headline and as many of the following sentences as fit in ``limit`` bytes."""
        parts = [self.headline, *self.sentences]
        while len(parts) > 1 and len(". ".join(parts).encode()) > limit:
            parts.pop()
        return _cut(". ".join(parts), limit)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form for the web view."""
        return {
            "reason": self.reason,
            "headline": self.headline,
            "sentences": list(self.sentences),
            "nodes": [vars_of(n) for n in self.nodes],
            "closest": [vars_of(c) for c in self.closest],
        }


def vars_of(item: NodeLine | ClosestDevice) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__slots__}


def _cut(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "..."

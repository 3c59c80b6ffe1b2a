"""Claim constraints: matchAttribute and distinctAttribute, with add/remove for backtracking.

A constraint applies to the devices of the requests it names (all requests when it names none); a subrequest
is named either by its parent request or as ``request/subrequest``. A device lacking the attribute never
satisfies it. Values compare by kind and value (an int 1 never equals a bool true, versions compare as
strings, as Kubernetes does for semver in minimal form).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudra.allocator.pools import AttrValue, DeviceEntry
from gpudra.api.dra import DeviceConstraint
from gpudra.errors import InvalidInputError


@dataclass(slots=True)
class Constraint:
    index: int
    attribute: str
    distinct: bool
    requests: frozenset[str]
    value: AttrValue | None = None
    count: int = 0
    seen: dict[AttrValue, int] = field(default_factory=dict)

    def applies(self, base: str, full: str) -> bool:
        return not self.requests or base in self.requests or full in self.requests

    def admits(self, value: AttrValue | None) -> bool:
        if value is None:
            return False
        if self.distinct:
            return value not in self.seen
        return self.count == 0 or value == self.value

    def add(self, value: AttrValue) -> None:
        if self.distinct:
            self.seen[value] = self.seen.get(value, 0) + 1
        else:
            if self.count == 0:
                self.value = value
            self.count += 1

    def remove(self, value: AttrValue) -> None:
        if self.distinct:
            left = self.seen[value] - 1
            if left:
                self.seen[value] = left
            else:
                del self.seen[value]
        else:
            self.count -= 1
            if self.count == 0:
                self.value = None

    def describe(self) -> str:
        kind = "distinctAttribute" if self.distinct else "matchAttribute"
        scope = ", ".join(sorted(self.requests)) if self.requests else "all requests"
        return f"{kind} {self.attribute} ({scope})"


def build_constraints(constraints: list[DeviceConstraint] | None) -> list[Constraint]:
    out: list[Constraint] = []
    for i, c in enumerate(constraints or ()):
        if c.match_attribute:
            out.append(Constraint(i, c.match_attribute, False, frozenset(c.requests or ())))
        elif c.distinct_attribute:
            out.append(Constraint(i, c.distinct_attribute, True, frozenset(c.requests or ())))
        else:
            raise InvalidInputError(f"constraint #{i}: neither matchAttribute nor distinctAttribute is set")
    return out


def try_add(constraints: list[Constraint], base: str, full: str, entry: DeviceEntry) -> int:
    """Add the device to every applicable constraint. Returns -1 on success, else the index (in
    ``constraints``) of the first constraint it violates (after rolling back the ones already added)."""
    for i, c in enumerate(constraints):
        if not c.applies(base, full):
            continue
        value = entry.attributes.get(c.attribute)
        if not c.admits(value):
            for j in range(i):
                prev = constraints[j]
                if prev.applies(base, full):
                    v = entry.attributes.get(prev.attribute)
                    assert v is not None
                    prev.remove(v)
            return i
        assert value is not None
        c.add(value)
    return -1


def remove(constraints: list[Constraint], base: str, full: str, entry: DeviceEntry) -> None:
    for c in constraints:
        if c.applies(base, full):
            value = entry.attributes.get(c.attribute)
            assert value is not None
            c.remove(value)

"""Claim constraints: matchAttribute and distinctAttribute, with add/remove for backtracking.

A constraint applies to the devices of the requests it names (all requests when it names none); a subrequest
is named either by its parent request or as ``request/subrequest``. A device lacking the attribute never
satisfies it. Values compare by kind and value (an int 1 never equals a bool true, versions compare as
strings, as Kubernetes does for semver in minimal form).

List attributes (DRAListTypeAttributes) compare as sets, a scalar as a set of one, as Kubernetes defines them
(KEP-5491): matchAttribute holds while the values common to all the devices are not empty, distinctAttribute while
no two devices share a value. For scalars both reduce to equal and pairwise different values. kube-scheduler does
so from 1.37 only: 1.36 turns the gate on for CEL (``includes()``) but not for its allocator (kubernetes#139332
wired it in 1.37), which then runs its scalar-only implementation (k8s.io/dynamic-resource-allocation v0.36.3,
``structured/internal/incubating``). There a list is a value of no known type: it joins a constraint only as its
first device, and under matchAttribute no device joins after it (``lists_as_sets`` false).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudra.allocator.pools import AttrValue, DeviceEntry, members
from gpudra.api.dra import DeviceConstraint
from gpudra.errors import InvalidInputError

LIST_SETS_MINOR = 37
"""The first Kubernetes minor whose kube-scheduler compares list attributes as sets in constraints."""


def lists_as_sets(minor: int) -> bool:
    """Whether kube-scheduler 1.<minor> compares list attributes as sets in matchAttribute and distinctAttribute
    (with DRAListTypeAttributes on; with it off the API server keeps no lists)."""
    return minor >= LIST_SETS_MINOR


@dataclass(slots=True)
class Constraint:
    index: int
    attribute: str
    distinct: bool
    requests: frozenset[str]
    lists_as_sets: bool = True
    """False: as kube-scheduler 1.36, a list value joins only an empty constraint and, under matchAttribute,
    nothing joins after it."""
    value: AttrValue | None = None
    """matchAttribute: the value of the devices added so far while all of them are scalars."""
    count: int = 0
    """How many devices were added."""
    seen: dict[AttrValue, int] = field(default_factory=dict)
    """distinctAttribute: how many added devices hold each value. matchAttribute, once a list joins: how many
    added devices hold each value (the common values are those all ``count`` devices hold)."""

    def applies(self, base: str, full: str) -> bool:
        return not self.requests or base in self.requests or full in self.requests

    def admits(self, value: AttrValue | None) -> bool:
        if value is None:
            return False
        if not self.lists_as_sets and (
            _is_list(value) or (not self.distinct and self.count and self.value is None)
        ):
            return self.count == 0
        if self.distinct:
            return all(m not in self.seen for m in members(value))
        if self.count == 0:
            return True
        if self.value is not None:
            return value == self.value if not _is_list(value) else self.value in members(value)
        return any(self.seen.get(m, 0) == self.count for m in members(value))

    def add(self, value: AttrValue) -> None:
        if self.distinct:
            if self.lists_as_sets or not _is_list(value):
                for m in members(value):
                    self.seen[m] = self.seen.get(m, 0) + 1
            self.count += 1
            return
        is_list = _is_list(value)
        if self.count == 0:
            self.value = None if is_list else value
        elif self.value is not None and is_list:  # the first list: count what the scalar devices so far hold
            self.seen = {self.value: self.count}
            self.value = None
        if self.value is None:
            for m in members(value):
                self.seen[m] = self.seen.get(m, 0) + 1
        self.count += 1

    def remove(self, value: AttrValue) -> None:
        if (self.distinct and (self.lists_as_sets or not _is_list(value))) or (
            not self.distinct and self.value is None
        ):
            for m in members(value):
                left = self.seen[m] - 1
                if left:
                    self.seen[m] = left
                else:
                    del self.seen[m]
        self.count -= 1
        if self.distinct:
            return
        if self.count == 0:
            self.value = None
            self.seen = {}

    def describe(self) -> str:
        kind = "distinctAttribute" if self.distinct else "matchAttribute"
        scope = ", ".join(sorted(self.requests)) if self.requests else "all requests"
        return f"{kind} {self.attribute} ({scope})"


def _is_list(value: AttrValue) -> bool:
    return type(value[1]) is frozenset


def build_constraints(
    constraints: list[DeviceConstraint] | None, *, lists_as_sets: bool = True
) -> list[Constraint]:
    out: list[Constraint] = []
    for i, c in enumerate(constraints or ()):
        if c.match_attribute:
            out.append(Constraint(i, c.match_attribute, False, frozenset(c.requests or ()), lists_as_sets))
        elif c.distinct_attribute:
            out.append(Constraint(i, c.distinct_attribute, True, frozenset(c.requests or ()), lists_as_sets))
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

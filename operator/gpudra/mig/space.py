"""The placement space of a GPU model: every valid explicit MIG layout, enumerated once per model.

A model has a few dozen (profile, start) placements and a few thousand valid layouts, so searching them all is
cheap. Layouts are bit masks over the placement list; ``containing(fixed)`` gives the layouts that keep a set of
instances (those in use) where they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpudra.hardware.gpus.catalog import MigModel, MigProfile, MigSpec
from gpudra.mig.layout import MigLayout, Placement, mig_spec, span

_ENGINE_ATTRS = ("decoders", "encoders", "jpeg_engines", "ofa_engines")


@dataclass(frozen=True)
class Candidate:
    """A valid layout that contains a given fixed set: its placement bits and the counts beyond the fixed set."""

    bits: int  # over PlacementSpace.placements
    extra: tuple[int, ...]  # per profile (PlacementSpace.profiles order), instances not in the fixed set
    memory: int  # occupied memory slices (bit mask)


class PlacementSpace:
    """All valid layouts of one MIG model."""

    def __init__(self, spec: MigSpec) -> None:
        self.spec = spec
        self.profiles: tuple[MigProfile, ...] = spec.profiles
        self.profile_index = {p.name: i for i, p in enumerate(self.profiles)}
        self.placements: tuple[Placement, ...] = tuple(
            Placement(s, p.name) for p in self.profiles for s in p.starts
        )
        self.placement_index = {p: i for i, p in enumerate(self.placements)}
        self._prof = [self.profile_index[p.profile] for p in self.placements]
        self._mem = [span(self.profiles[self._prof[i]], p.start) for i, p in enumerate(self.placements)]
        self.layouts: tuple[int, ...] = tuple(self._enumerate())
        self._cache: dict[int, tuple[Candidate, ...]] = {}

    def _valid_engines(self, counts: Sequence[int]) -> bool:
        largest = max(self.profiles, key=lambda p: (p.slice_count, p.placement_size))
        for attr in _ENGINE_ATTRS:
            need = sum(int(getattr(p, attr)) * n for p, n in zip(self.profiles, counts, strict=True))
            if need > int(getattr(largest, attr)):
                return False
        return sum(n for p, n in zip(self.profiles, counts, strict=True) if "+me" in p.suffix) <= 1

    def _enumerate(self) -> list[int]:
        out: list[int] = []
        counts = [0] * len(self.profiles)
        limit_compute, limit_devices = self.spec.compute_slices, self.spec.max_devices

        def walk(i: int, bits: int, memory: int, compute: int, devices: int) -> None:
            if i == len(self.placements):
                if self._valid_engines(counts):
                    out.append(bits)
                return
            walk(i + 1, bits, memory, compute, devices)
            k = self._prof[i]
            profile = self.profiles[k]
            if (
                not memory & self._mem[i]
                and counts[k] < profile.instance_count
                and compute + profile.slice_count <= limit_compute
                and devices < limit_devices
            ):
                counts[k] += 1
                walk(i + 1, bits | 1 << i, memory | self._mem[i], compute + profile.slice_count, devices + 1)
                counts[k] -= 1

        walk(0, 0, 0, 0, 0)
        return out

    def bits_of(self, placements: Iterable[Placement]) -> int:
        bits = 0
        for p in placements:
            bits |= 1 << self.placement_index[p]
        return bits

    def layout_of(self, bits: int, *, mig_enabled: bool = True) -> MigLayout:
        return MigLayout(mig_enabled, tuple(p for i, p in enumerate(self.placements) if bits >> i & 1))

    def memory_of(self, bits: int) -> int:
        return sum(self._mem[i] for i in range(len(self.placements)) if bits >> i & 1)

    def counts_of(self, bits: int) -> tuple[int, ...]:
        counts = [0] * len(self.profiles)
        for i in range(len(self.placements)):
            if bits >> i & 1:
                counts[self._prof[i]] += 1
        return tuple(counts)

    def containing(self, fixed: int) -> tuple[Candidate, ...]:
        """Every valid layout that keeps the placements in ``fixed``."""
        cached = self._cache.get(fixed)
        if cached is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            cached = tuple(
                Candidate(bits, self.counts_of(bits & ~fixed), self.memory_of(bits))
                for bits in self.layouts
                if bits & fixed == fixed
            )
            self._cache[fixed] = cached
        return cached

    def flexibility(self, memory: int) -> int:
        """How many distinct placements are still free beside ``memory`` (a tie-breaker that keeps room for
        large profiles and for variety)."""
        return sum(1 for m in self._mem if not m & memory)


_SpaceKey = tuple[str, tuple[MigProfile, ...], int, int, int]
_SPACES: dict[_SpaceKey, PlacementSpace] = {}  # a memo of pure results, keyed by everything they depend on


def placement_space(model: MigModel) -> PlacementSpace:
    """The (memoised) placement space of a MIG model."""
    spec = mig_spec(model)
    key = (model.model_id, spec.profiles, spec.memory_slices, spec.compute_slices, spec.max_devices)
    space = _SPACES.get(key)
    if space is None:
        space = _SPACES[key] = PlacementSpace(spec)
    return space

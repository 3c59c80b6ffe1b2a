"""Validation of MIG layouts against a GPU model, and placement of counts-only layouts.

Every problem gets its own message naming the profile, counts and slices involved, so a MigLayout status or an
Event tells the user what to change. The rules (mig-hardware reference, "What makes a MIG layout invalid"):
profiles must exist on the model; a profile's instanceCount and the model's compute-slice and device limits
hold; media engines (decoders, encoders, JPEG, OFA) are not oversubscribed (a ``+me`` instance takes the GPU's
only OFA, so at most one exists and never beside a 7g); placements come from the profile's list and never
overlap.

Placement rule for counts-only layouts (mig-parted's ``{profile: count}``): instances are placed larger first
(memory slices, then compute slices, then name), each at the lowest start that still lets the rest fit
(depth-first search with backtracking over the profile's placement list; instances of one profile take
increasing starts). The result is deterministic and never depends on creation order, because every instance
is then created with its explicit placement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from gpudra.hardware.gpus.catalog import MigModel, MigProfile, MigSpec
from gpudra.mig.layout import InvalidLayoutError, MigLayout, Placement, mig_spec, slices_text, span

_ENGINES = (
    ("decoders", "decoder"),
    ("encoders", "encoder"),
    ("jpeg_engines", "JPEG"),
    ("ofa_engines", "OFA"),
)


def _starts_text(starts: Sequence[int]) -> str:
    return ", ".join(str(s) for s in starts)


def max_disjoint(profile: MigProfile) -> int:
    """How many instances of ``profile`` fit side by side on an otherwise empty GPU."""
    count, end = 0, -1
    for start in sorted(profile.starts):
        if start >= end:
            count, end = count + 1, start + profile.placement_size
    return count


def _engine_capacity(spec: MigSpec, attr: str) -> int:
    largest = max(spec.profiles, key=lambda p: (p.slice_count, p.placement_size))
    return int(getattr(largest, attr))


def count_problems(model: MigModel, counts: Mapping[str, int]) -> list[str]:
    """Problems of a multiset of profiles on ``model``, regardless of placements (empty when none)."""
    spec = mig_spec(model)
    known = {p.name: p for p in spec.profiles}
    problems: list[str] = []
    profiles: list[tuple[MigProfile, int]] = []
    for name, count in counts.items():
        if name not in known:
            valid = ", ".join(p.name for p in spec.profiles)
            problems.append(f"unknown MIG profile {name!r} for {model.model_id} (valid profiles: {valid})")
        elif count < 0:
            problems.append(f"{name}: count {count} is negative")
        elif count > 0:
            profiles.append((known[name], count))
    for profile, count in profiles:
        if count > profile.instance_count:
            problems.append(
                f"too many {profile.name}: {count} requested, {model.model_id} allows at most "
                f"{profile.instance_count} (instanceCount)"
            )
        fit = max_disjoint(profile)
        if count > fit:
            exists = (
                "only one placement exists" if fit == 1 else f"only {fit} non-overlapping placements exist"
            )
            problems.append(
                f"{profile.name} x{count} needs {count * profile.placement_size} memory slices starting at "
                f"{_starts_text(profile.starts)}; {exists}"
            )
    compute = sum(p.slice_count * n for p, n in profiles)
    if compute > spec.compute_slices:
        problems.append(
            f"the layout needs {compute} compute slices; {model.model_id} has {spec.compute_slices}"
        )
    memory = sum(p.placement_size * n for p, n in profiles)
    if memory > spec.memory_slices:
        problems.append(f"the layout needs {memory} memory slices; {model.model_id} has {spec.memory_slices}")
    devices = sum(n for _, n in profiles)
    if devices > spec.max_devices:
        problems.append(f"the layout has {devices} MIG devices; {model.model_id} allows {spec.max_devices}")
    media = [p for p, n in profiles for _ in range(n) if "+me" in p.suffix]
    if len(media) > 1:
        names = ", ".join(p.name for p in media)
        problems.append(f"at most one +me instance per GPU (it owns the media engines); requested: {names}")
        return problems
    for attr, label in _ENGINES:
        need = sum(int(getattr(p, attr)) * n for p, n in profiles)
        capacity = _engine_capacity(spec, attr)
        if need > capacity:
            users = ", ".join(f"{p.name} x{n}" for p, n in profiles if getattr(p, attr))
            problems.append(
                f"media-engine conflict: {users} need {need} {label} engine(s); {model.model_id} has {capacity}"
            )
    return problems


def layout_problems(model: MigModel, layout: MigLayout) -> list[str]:
    """Problems of an explicit layout on ``model`` (empty when it can be created as written)."""
    if not layout.mig_enabled:
        if layout.instances:
            return [f"MIG is disabled but the layout lists {len(layout.instances)} instance(s)"]
        return []
    spec = mig_spec(model)
    known = {p.name: p for p in spec.profiles}
    problems = count_problems(model, layout.counts())
    placed: list[tuple[Placement, MigProfile]] = []
    for inst in layout.instances:
        profile = known.get(inst.profile)
        if profile is None:
            continue  # already reported as unknown
        if inst.start not in profile.starts:
            problems.append(
                f"{inst}: {inst.start} is not a placement of {profile.name} on {model.model_id} "
                f"(valid starts: {_starts_text(profile.starts)})"
            )
            continue
        for other, other_profile in placed:
            if span(profile, inst.start) & span(other_profile, other.start):
                problems.append(
                    f"{inst} {slices_text(profile, inst.start)} overlaps {other} "
                    f"{slices_text(other_profile, other.start)}"
                )
        placed.append((inst, profile))
    return problems


def validate_layout(model: MigModel, layout: MigLayout) -> None:
    """Raise :class:`InvalidLayoutError` listing every problem of ``layout`` on ``model``."""
    problems = layout_problems(model, layout)
    if problems:
        raise InvalidLayoutError(problems, model_id=model.model_id)


def _order_key(profile: MigProfile) -> tuple[int, int, str]:
    return (-profile.placement_size, -profile.slice_count, profile.name)


def search_placements(
    spec: MigSpec,
    names: Iterable[str],
    *,
    occupied: int = 0,
    prefer: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Placement, ...] | None:
    """Explicit starts for instances of ``names`` on the free memory slices (``occupied`` is a bit mask of the
    taken ones), or None when no non-overlapping assignment exists. ``prefer`` lists starts to try first per
    profile (to keep instances where they are); otherwise the lowest start that lets the rest fit wins."""
    known = {p.name: p for p in spec.profiles}
    items = sorted((known[n] for n in names), key=_order_key)
    wanted = prefer or {}
    chosen: list[int] = []

    def candidates(index: int) -> list[int]:
        profile = items[index]
        floor = chosen[index - 1] + 1 if index and items[index - 1].name == profile.name else 0
        first = sorted({s for s in wanted.get(profile.name, ()) if s in profile.starts})
        rest = [s for s in profile.starts if s not in first]
        return [s for s in (*first, *rest) if s >= floor]

    def place(index: int, mask: int) -> bool:
        if index == len(items):
            return True
        profile = items[index]
        for start in candidates(index):
            bits = span(profile, start)
            if bits & mask:
                continue
            chosen.append(start)
            if place(index + 1, mask | bits):
                return True
            chosen.pop()
        return False

    if not place(0, occupied):
        return None
    return tuple(Placement(start, p.name) for p, start in zip(items, chosen, strict=True))


def _describe(counts: Mapping[str, int]) -> str:
    return " + ".join(f"{name} x{n}" if n > 1 else name for name, n in sorted(counts.items()))


def place_counts(model: MigModel, counts: Mapping[str, int], *, mig_enabled: bool = True) -> MigLayout:
    """The explicit layout of a counts-only layout (see the module's placement rule); raises
    :class:`InvalidLayoutError` with the reasons when the counts cannot exist on ``model``."""
    if not mig_enabled:
        if any(counts.values()):
            raise InvalidLayoutError(
                ["mig-devices must be empty when MIG is disabled"], model_id=model.model_id
            )
        return MigLayout(False)
    problems = count_problems(model, counts)
    if problems:
        raise InvalidLayoutError(problems, model_id=model.model_id)
    spec = mig_spec(model)
    names = [name for name, n in sorted(counts.items()) for _ in range(n)]
    found = search_placements(spec, names)
    if found is None:
        raise InvalidLayoutError([_unplaceable_reason(spec, names)], model_id=model.model_id)
    return MigLayout(True, found)


def _unplaceable_reason(spec: MigSpec, names: list[str]) -> str:
    """Shrink an unplaceable multiset to a minimal one that still cannot be placed, and say why."""
    core = list(names)
    shrunk = True
    while shrunk:
        shrunk = False
        for i in range(len(core)):
            rest = core[:i] + core[i + 1 :]
            if rest and search_placements(spec, rest) is None:
                core, shrunk = rest, True
                break
    known = {p.name: p for p in spec.profiles}
    starts = "; ".join(
        f"{name} starts at {_starts_text(known[name].starts)} and spans {known[name].placement_size}"
        for name in sorted(set(core))
    )
    return f"{_describe(Counter(core))} has no non-overlapping placement ({starts})"

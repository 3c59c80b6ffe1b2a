"""MIG layout validation: what a user sees when a layout cannot exist, per GPU model, and placement of
counts-only layouts."""

from __future__ import annotations

import itertools

import pytest

from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.catalog import GpuModel, load_catalog
from gpudra.mig.layout import InvalidLayoutError, MigLayout
from gpudra.mig.migparted import default_configs, entry_for_gpu
from gpudra.mig.validate import (
    count_problems,
    layout_problems,
    place_counts,
    search_placements,
    validate_layout,
)

CATALOG = load_catalog()
MIG_MODELS = [m for m in CATALOG.models.values() if m.mig is not None]
A100_40 = CATALOG.model("A100-SXM4-40GB")
A100_80 = CATALOG.model("A100-SXM4-80GB")
H100 = CATALOG.model("H100-SXM5-80GB")
H200 = CATALOG.model("H200")
A30 = CATALOG.model("A30")


def _problems(model: GpuModel, counts: dict[str, int]) -> str:
    with pytest.raises(InvalidLayoutError) as err:
        place_counts(model, counts)
    assert isinstance(err.value, InvalidInputError)
    return str(err.value)


VALID_COUNTS = [
    (A100_40, {"1g.5gb": 7}),
    (A100_40, {"4g.20gb": 1, "3g.20gb": 1}),
    (A100_40, {"1g.5gb+me": 1, "1g.5gb": 6}),
    (A100_40, {"1g.10gb": 4}),
    (A100_80, {"3g.40gb": 2}),
    (A100_80, {"2g.20gb": 3, "1g.10gb": 1}),
    (A100_80, {"1g.20gb": 2, "2g.20gb": 2}),
    (H100, {"1g.10gb": 7}),
    (H100, {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}),
    (H100, {"3g.40gb": 1, "1g.10gb": 4}),
    (H100, {"7g.80gb": 1}),
    (H100, {}),
    (H200, {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    (H200, {"1g.35gb": 4}),
    (A30, {"2g.12gb": 1, "1g.6gb": 2}),
    (A30, {"1g.6gb+me": 1, "1g.6gb": 3}),
    (A30, {"4g.24gb": 1}),
]


@pytest.mark.parametrize(
    ("model", "counts"), VALID_COUNTS, ids=lambda v: str(v) if isinstance(v, dict) else ""
)
def test_valid_counts_are_placed_without_overlap(model: GpuModel, counts: dict[str, int]) -> None:
    layout = place_counts(model, counts)
    assert layout.counts() == {k: v for k, v in counts.items() if v}
    assert layout_problems(model, layout) == []


INVALID_COUNTS = [
    (H100, {"4g.40gb": 2}, "4g.40gb x2 needs 8 memory slices starting at 0; only one placement exists"),
    (H100, {"4g.40gb": 2}, "too many 4g.40gb: 2 requested, H100-SXM5-80GB allows at most 1 (instanceCount)"),
    (H100, {"1g.10gb": 8}, "1g.10gb x8 needs 8 memory slices starting at 0, 1, 2, 3, 4, 5, 6"),
    (H100, {"3g.40gb": 3}, "too many 3g.40gb: 3 requested"),
    (H100, {"3g.40gb": 2, "1g.10gb": 1}, "the layout needs 9 memory slices; H100-SXM5-80GB has 8"),
    (
        H100,
        {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1},
        "the layout needs 8 compute slices; H100-SXM5-80GB has 7",
    ),
    (H100, {"1g.10gb+me": 2}, "too many 1g.10gb+me: 2 requested, H100-SXM5-80GB allows at most 1"),
    (H100, {"7g.80gb": 1, "1g.10gb": 1}, "the layout needs 8 compute slices"),
    (H100, {"2g.10gb": 1}, "unknown MIG profile '2g.10gb' for H100-SXM5-80GB (valid profiles: 1g.10gb, "),
    (A100_40, {"1g.10gb": 5}, "too many 1g.10gb: 5 requested, A100-SXM4-40GB allows at most 4"),
    (A100_40, {"2g.10gb": 4}, "2g.10gb x4 needs 8 memory slices starting at 0, 2, 4; only 3 non-overlapping"),
    (A100_80, {"1g.5gb": 1}, "unknown MIG profile '1g.5gb' for A100-SXM4-80GB"),
    (A100_80, {"2g.20gb": 3, "1g.20gb": 1, "1g.10gb": 1}, "compute slices"),
    (H200, {"1g.35gb": 5}, "too many 1g.35gb: 5 requested, H200 allows at most 4"),
    (A30, {"1g.6gb": 5}, "the layout needs 5 compute slices; A30 has 4"),
    (A30, {"2g.12gb": 2, "1g.6gb": 1}, "A30 has 4"),
    (A30, {"1g.6gb+me": 1, "2g.12gb+me": 1}, "at most one +me instance per GPU"),
    (A30, {"4g.24gb": 1, "1g.6gb": 1}, "the layout needs 5 compute slices; A30 has 4"),
]


@pytest.mark.parametrize(("model", "counts", "message"), INVALID_COUNTS)
def test_invalid_counts_name_the_reason(model: GpuModel, counts: dict[str, int], message: str) -> None:
    assert message in _problems(model, counts)


def test_every_count_valid_combination_has_a_placement() -> None:
    """On every MIG model, counts that pass the count rules are always placeable (no hidden fragmentation)."""
    for model in (A100_40, H100, A30):
        assert model.mig is not None
        profiles = model.mig.profiles
        for combo in itertools.product(*[range(p.instance_count + 1) for p in profiles]):
            counts = {p.name: n for p, n in zip(profiles, combo, strict=True) if n}
            if not count_problems(model, counts):
                assert place_counts(model, counts).counts() == counts


def test_search_around_taken_slices() -> None:
    assert H100.mig is not None
    taken = 1 << 3  # a 1g instance in use at slice 3
    assert search_placements(H100.mig, ["4g.40gb"], occupied=taken) is None
    found = search_placements(H100.mig, ["3g.40gb", "1g.10gb", "1g.10gb"], occupied=taken)
    assert found is not None
    assert [str(p) for p in found] == ["3g.40gb@4", "1g.10gb@0", "1g.10gb@1"]


EXPLICIT = [
    (H100, MigLayout.of(("4g.40gb", 0), ("3g.40gb", 4)), []),
    (H100, MigLayout.of(("3g.40gb", 0), ("3g.40gb", 4)), []),
    (
        H100,
        MigLayout.of(("2g.20gb", 4), ("3g.40gb", 4)),
        ["3g.40gb@4 [4, 8) overlaps 2g.20gb@4 [4, 6)"],
    ),
    (
        H100,
        MigLayout.of(("1g.10gb", 7)),
        ["1g.10gb@7: 7 is not a placement of 1g.10gb on H100-SXM5-80GB (valid starts: 0, 1, 2, 3, 4, 5, 6)"],
    ),
    (
        A100_80,
        MigLayout.of(("3g.40gb", 2)),
        ["3g.40gb@2: 2 is not a placement of 3g.40gb on A100-SXM4-80GB (valid starts: 0, 4)"],
    ),
    (A30, MigLayout.of(("2g.12gb", 0), ("2g.12gb", 2)), []),
    (
        A30,
        MigLayout.of(("2g.12gb", 1)),
        ["2g.12gb@1: 1 is not a placement of 2g.12gb on A30 (valid starts: 0, 2)"],
    ),
    (H100, MigLayout(False, ()), []),
]


@pytest.mark.parametrize(("model", "layout", "expected"), EXPLICIT)
def test_explicit_layouts(model: GpuModel, layout: MigLayout, expected: list[str]) -> None:
    assert layout_problems(model, layout) == expected


def test_disabled_layout_with_instances_is_invalid() -> None:
    with pytest.raises(InvalidLayoutError, match="MIG is disabled but the layout lists 1 instance"):
        validate_layout(H100, MigLayout(False, MigLayout.of(("1g.10gb", 0)).instances))


def test_model_without_mig_is_rejected() -> None:
    with pytest.raises(InvalidLayoutError, match="L4 does not support MIG"):
        place_counts(CATALOG.model("L4"), {"1g.10gb": 1})


def test_placement_is_deterministic_and_keeps_big_profiles_low() -> None:
    layout = place_counts(H100, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    assert str(layout) == "[2g.20gb@0, 1g.10gb@2, 1g.10gb@3, 3g.40gb@4]"
    assert place_counts(H100, {"3g.40gb": 1, "4g.40gb": 1}) == MigLayout.of(("4g.40gb", 0), ("3g.40gb", 4))
    # the order of the counts never matters
    assert place_counts(H100, {"3g.40gb": 1, "1g.10gb": 2, "2g.20gb": 1}) == layout


def _default_layouts() -> list[tuple[str, str, dict[str, int]]]:
    out = []
    for name, entries in default_configs().configs.items():
        for model in MIG_MODELS:
            entry = entry_for_gpu(entries, 0, model.pci_device_id)
            if entry is not None and entry.mig_enabled:
                out.append((model.model_id, name, entry.counts))
    return out


@pytest.mark.parametrize(("model_id", "name", "counts"), _default_layouts())
def test_every_mig_parted_default_is_valid_on_its_model(
    model_id: str, name: str, counts: dict[str, int]
) -> None:
    layout = place_counts(CATALOG.model(model_id), counts)
    assert layout.counts() == {k: v for k, v in counts.items() if v}

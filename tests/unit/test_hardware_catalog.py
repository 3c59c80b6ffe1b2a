"""The GPU catalog and node profiles: consistent data, names as NVIDIA's tools compute them, and mig-parted
layouts that really fit the hardware (checked by placing them on the simulated GPU)."""

from __future__ import annotations

import ctypes

import pytest

from gpudra.errors import ConfigurationError
from gpudra.hardware.gpus.catalog import (
    GpuModel,
    MigSpec,
    load_catalog,
    mig_memory_gb,
    mig_profile_name,
    parse_catalog,
)
from gpudra.hardware.simulated import FakeNvml
from gpudra.hardware.simulated.profiles import NODE_PROFILES, GpuSlot, NodeProfile, node_profile

CATALOG = load_catalog()
MIG_MODELS = [m for m in CATALOG.models.values() if m.mig is not None]


def _spec(model: GpuModel) -> MigSpec:
    assert model.mig is not None
    return model.mig


def test_catalog_has_the_models_users_run() -> None:
    expected = {
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "A30",
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "H100-NVL",
        "H200",
        "B200",
        "GB200",
        "RTX-PRO-6000",
        "L4",
        "L40S",
        "T4",
    }
    assert expected <= set(CATALOG.models)
    assert not CATALOG.model("L4").mig_capable
    assert CATALOG.model("H100-SXM5-80GB").product_name == "NVIDIA H100 80GB HBM3"
    assert CATALOG.by_pci_device_id(0x233010DE) == CATALOG.model("H100-SXM5-80GB")


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.model_id)
def test_placements_stay_inside_the_gpu_and_do_not_repeat(model: GpuModel) -> None:
    spec = _spec(model)
    for profile in spec.profiles:
        assert profile.starts, profile.name
        assert len(set(profile.starts)) == len(profile.starts), profile.name
        for start in profile.starts:
            assert start >= 0, (profile.name, start)
            assert start + profile.placement_size <= spec.memory_slices, (profile.name, start)
        assert profile.slice_count <= spec.compute_slices
        assert profile.instance_count <= spec.max_devices


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.model_id)
def test_profile_ids_constants_and_names_are_unique_per_model(model: GpuModel) -> None:
    profiles = _spec(model).profiles
    for attribute in ("profile_id", "constant", "name"):
        values = [getattr(p, attribute) for p in profiles]
        assert len(set(values)) == len(values), attribute


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.model_id)
def test_names_agree_with_the_go_nvlib_formula(model: GpuModel) -> None:
    for profile in _spec(model).profiles:
        computed = mig_profile_name(profile.slice_count, profile.memory_mib, model.memory_mib, profile.suffix)
        assert computed == profile.name


@pytest.mark.parametrize(
    ("memory_mib", "total_mib", "gb"),
    [
        (16384, 143771, 18),  # H200 1g rounds up
        (71168, 143771, 71),  # H200 3g: 70.5 rounds half away from zero
        (4864, 40960, 5),  # A100-40GB 1g
        (9984, 81559, 10),  # H100 1g
        (22144, 95830, 24),  # H100 NVL 1g.24gb: 23.5 -> 24
    ],
)
def test_memory_gb_examples(memory_mib: int, total_mib: int, gb: int) -> None:
    assert mig_memory_gb(memory_mib, total_mib) == gb


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.model_id)
def test_every_profile_has_a_compute_instance_spanning_it(model: GpuModel) -> None:
    for profile in _spec(model).profiles:
        full = profile.full_compute_instance()
        assert full.slice_count == profile.slice_count
        assert full.multiprocessors == profile.multiprocessors


def _search(spec: MigSpec, counts: dict[str, int]) -> list[tuple[str, int]] | None:
    """Explicit placements for the wanted instances (largest first), or None when none exist."""
    wanted = sorted(
        (spec.profile(name) for name, n in counts.items() for _ in range(n)),
        key=lambda p: (-p.placement_size, p.name),
    )
    used: set[int] = set()
    chosen: list[tuple[str, int]] = []

    def place(i: int) -> bool:
        if i == len(wanted):
            return True
        profile = wanted[i]
        for start in profile.starts:
            cells = set(range(start, start + profile.placement_size))
            if used.isdisjoint(cells):
                used.update(cells)
                chosen.append((profile.name, start))
                if place(i + 1):
                    return True
                chosen.pop()
                used.difference_update(cells)
        return False

    return chosen if place(0) else None


def _mig_gpu(model: GpuModel) -> tuple[FakeNvml, object]:
    profile = NodeProfile(
        name=f"test-{model.model_id}",
        model_id=model.model_id,
        slots=(GpuSlot("0000:01:00.0", 0, "pci0000:00"),),
        mig_enabled=True,
    )
    nvml = FakeNvml.from_profile(profile, node_name="catalog-test")
    nvml.nvmlInit()
    return nvml, nvml.nvmlDeviceGetHandleByIndex(0)


MIG_PARTED_CASES = [
    (model, name, counts)
    for model in MIG_MODELS
    for name, counts in _spec(model).mig_parted_configs().items()
]


@pytest.mark.parametrize(
    ("model", "config", "counts"), MIG_PARTED_CASES, ids=[f"{m.model_id}-{c}" for m, c, _ in MIG_PARTED_CASES]
)
def test_mig_parted_layouts_fit_on_the_simulated_gpu(
    model: GpuModel, config: str, counts: dict[str, int]
) -> None:
    spec = _spec(model)
    placements = _search(spec, counts)
    assert placements is not None, f"{config} has no placement on {model.model_id}"
    nvml, handle = _mig_gpu(model)
    for name, start in placements:
        profile = spec.profile(name)
        placement = nvml.c_nvmlGpuInstancePlacement_t(start, profile.placement_size)
        gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, profile.profile_id, ctypes.byref(placement)
        )
        nvml.nvmlGpuInstanceCreateComputeInstance(gi, profile.full_compute_instance().constant)
    assert sum(counts.values()) == len(nvml.gpu(0).gpu_instances)


def test_all_balanced_exists_for_the_mig_parted_models() -> None:
    for model_id in ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "A30", "H200", "B200"):
        assert _spec(CATALOG.model(model_id)).all_balanced, model_id
    assert _spec(CATALOG.model("A100-SXM4-40GB")).all_balanced == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert "all-1g.10gb.me" in _spec(CATALOG.model("H100-SXM5-80GB")).mig_parted_configs()


def test_node_profiles_refer_to_catalog_models_and_valid_layouts() -> None:
    for profile in NODE_PROFILES.values():
        model = CATALOG.model(profile.model_id)
        assert profile.gpu_count == len(profile.slots) > 0
        bus_ids = [slot.pci_bus_id for slot in profile.slots]
        assert len(set(bus_ids)) == len(bus_ids)
        for name, start in profile.mig_layout:
            assert start in _spec(model).profile(name).starts
    assert node_profile("dgx-h100").gpu_count == 8
    assert node_profile("gb200-nvl72").gpu_count == 4


def test_unknown_names_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="unknown node profile 'dgx-z9'"):
        node_profile("dgx-z9")
    with pytest.raises(ConfigurationError, match="unknown GPU model"):
        CATALOG.model("Z100")
    with pytest.raises(ConfigurationError, match=r"unknown MIG profile '9g\.1tb'"):
        _spec(CATALOG.model("A100-SXM4-40GB")).profile("9g.1tb")


def test_invalid_catalog_document_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="invalid GPU catalog"):
        parse_catalog({"models": {"X": {"product_name": "X"}}})

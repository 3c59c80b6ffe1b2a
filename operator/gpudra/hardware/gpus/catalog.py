"""The GPU catalog: models, their MIG profiles and placements, loaded from ``catalog.yaml``.

The catalog is data (driver-version-sensitive numbers belong in the YAML file, not in code). It seeds the
simulated NVML and the tests, and stands in for the MIG facts of a node whose agent reports none (real nodes report
theirs, read from NVML: :mod:`gpudra.hardware.gpus.migfacts`); the NVML backend only borrows
:func:`mig_profile_name` and the profile-name suffixes, so what it publishes is computed the way NVIDIA's driver
(go-nvlib) computes it."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from fractions import Fraction
from importlib import resources
from typing import Any

from pydantic import Field, ValidationError, field_validator

from gpudra import shippedyaml
from gpudra.api.base import FrozenModel
from gpudra.errors import ConfigurationError

MIB = 2**20

# NVML_GPU_INSTANCE_PROFILE_* constant -> the suffix go-nvlib appends to the profile name.
PROFILE_SUFFIX_BY_CONSTANT: Mapping[int, str] = {
    0x7: "+me",  # 1_SLICE_REV1
    0x8: "+me",  # 2_SLICE_REV1
    0xA: "+gfx",  # 1_SLICE_GFX
    0xB: "+gfx",  # 2_SLICE_GFX
    0xC: "+gfx",  # 4_SLICE_GFX
    0xD: "-me",  # 1_SLICE_NO_ME
    0xE: "-me",  # 2_SLICE_NO_ME
    0xF: "+me.all",  # 1_SLICE_ALL_ME
    0x10: "+me.all",  # 2_SLICE_ALL_ME
    0x11: "+gfx",  # 3_SLICE_GFX
}

# Compute-slice count -> NVML_COMPUTE_INSTANCE_PROFILE_* constant (which is also the CI profile id).
CI_CONSTANT_BY_SLICES: Mapping[int, int] = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


class ComputeInstanceProfile(FrozenModel):
    """A compute-instance profile inside one GPU-instance profile ("1c" of a "3g")."""

    constant: int  # NVML_COMPUTE_INSTANCE_PROFILE_*; NVML reports it as the CI profile id too
    slice_count: int
    instance_count: int
    multiprocessors: int  # approximate for partial CIs: the GI's SMs shared in proportion

    @property
    def name(self) -> str:
        return f"{self.slice_count}c"


class MigProfile(FrozenModel):
    """One GPU-instance profile of a model, as ``nvidia-smi mig -lgip`` / ``-lgipp`` print it."""

    name: str  # "1g.10gb", "1g.10gb+me"
    # NVML_GPU_INSTANCE_PROFILE_*; None for a profile read from a node's report, which names it by profile_id
    constant: int | None = None
    profile_id: int  # info.id
    slice_count: int  # compute slices
    placement_size: int  # memory slices
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    instance_count: int
    starts: tuple[int, ...]
    note: str = ""
    compute_instances: tuple[ComputeInstanceProfile, ...] = ()

    @property
    def suffix(self) -> str:
        """What follows the memory size in the name ("+me", "-me", "+gfx", ...; "" for none)."""
        return self.name.partition("gb")[2]

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def full_compute_instance(self) -> ComputeInstanceProfile:
        """The compute instance spanning the whole GPU instance (what a MIG device gets by default)."""
        return next(ci for ci in self.compute_instances if ci.slice_count == self.slice_count)


class MigSpec(FrozenModel):
    memory_slices: int
    compute_slices: int
    max_devices: int
    all_balanced: dict[str, int] = Field(default_factory=dict)
    profiles: tuple[MigProfile, ...]

    @field_validator("profiles")
    @classmethod
    def _canonical_order(cls, profiles: tuple[MigProfile, ...]) -> tuple[MigProfile, ...]:
        """Profiles by compute slices, then memory slices, then NVML profile id, whatever order they came in.

        The placement search breaks ties by this order, so the catalog's model and the one built from a node's
        NVML report (in profile-id order) choose the same placements: the planner's prediction is what the
        agent creates."""
        return tuple(sorted(profiles, key=lambda p: (p.slice_count, p.placement_size, p.profile_id)))

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise ConfigurationError(f"unknown MIG profile {name!r} (known: {known})")

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.profile_id == profile_id), None)

    def profile_by_constant(self, constant: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.constant == constant), None)

    @property
    def jpeg_capacity(self) -> int:
        """JPEG engines of the whole GPU: those of its largest profile."""
        return self._largest().jpeg_engines

    @property
    def ofa_capacity(self) -> int:
        """Optical-flow engines of the whole GPU (1 on every MIG-capable model)."""
        return self._largest().ofa_engines

    def _largest(self) -> MigProfile:
        return max(self.profiles, key=lambda p: (p.slice_count, p.placement_size, -(p.constant or 0)))

    def mig_parted_configs(self) -> dict[str, dict[str, int]]:
        """mig-parted's default per-model configs: all-balanced and one all-<profile> per profile."""
        configs: dict[str, dict[str, int]] = {}
        if self.all_balanced:
            configs["all-balanced"] = dict(self.all_balanced)
        for profile in self.profiles:
            configs[f"all-{profile.name.replace('+', '.')}"] = {profile.name: profile.instance_count}
        return configs


class MigModel(FrozenModel):
    """What the MIG layouts, the planner and the web view need of a GPU model: its memory and MIG facts. A node's
    agent reports them as read from NVML (:func:`gpudra.hardware.gpus.migfacts.mig_model`); the catalog's
    :class:`GpuModel` is one too, for nodes that report none."""

    model_id: str
    memory_mib: int
    mig: MigSpec | None = None

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None


class GpuModel(MigModel):
    """A catalog model: everything the simulated NVML answers about it."""

    product_name: str
    multiprocessors: int
    compute_capability: str
    architecture: str
    architecture_constant: int
    pci_device_id: int
    brand: str
    brand_constant: int
    nvlink_count: int
    note: str = ""


class Catalog(FrozenModel):
    models: dict[str, GpuModel]

    def model(self, model_id: str) -> GpuModel:
        try:
            return self.models[model_id]
        except KeyError:
            known = ", ".join(sorted(self.models))
            raise ConfigurationError(f"unknown GPU model {model_id!r} (known: {known})") from None

    def by_product_name(self, product_name: str) -> GpuModel | None:
        return next((m for m in self.models.values() if m.product_name == product_name), None)

    def by_pci_device_id(self, pci_device_id: int) -> GpuModel | None:
        return next((m for m in self.models.values() if m.pci_device_id == pci_device_id), None)


def mig_memory_gb(memory_mib: int, total_memory_mib: int) -> int:
    """The "<N>gb" of a MIG profile name, as go-nvlib computes it from NVML's numbers.

    The instance's share of the GPU is rounded up to eighths, multiplied by the GPU's memory in whole GiB
    (rounded up), and rounded half away from zero.
    """
    if memory_mib <= 0 or total_memory_mib <= 0:
        raise ValueError("memory sizes must be positive")
    eighths = math.ceil(Fraction(memory_mib * 8, total_memory_mib))
    total_gb = -(-total_memory_mib // 1024)
    value = Fraction(eighths, 8) * total_gb
    return math.floor(value + Fraction(1, 2))


def mig_profile_name(slice_count: int, memory_mib: int, total_memory_mib: int, suffix: str = "") -> str:
    """ "<slices>g.<GB>gb<suffix>", e.g. ``mig_profile_name(1, 16384, 143771) == "1g.18gb"``."""
    return f"{slice_count}g.{mig_memory_gb(memory_mib, total_memory_mib)}gb{suffix}"


def _with_compute_instances(
    raw_profile: dict[str, Any], ci_table: dict[int, list[list[int]]]
) -> dict[str, Any]:
    slices = int(raw_profile["slice_count"])
    sm_per_slice = int(raw_profile["multiprocessors"]) // slices
    cis = []
    for ci_slices, count in ci_table.get(slices, [[slices, 1]]):
        sms = int(raw_profile["multiprocessors"]) if ci_slices == slices else sm_per_slice * ci_slices
        cis.append(
            {
                "constant": CI_CONSTANT_BY_SLICES[ci_slices],
                "slice_count": ci_slices,
                "instance_count": count,
                "multiprocessors": sms,
            }
        )
    return {**raw_profile, "compute_instances": cis}


def parse_catalog(document: Mapping[str, Any]) -> Catalog:
    """Build a :class:`Catalog` from the parsed YAML; raises ConfigurationError when it is invalid."""
    try:
        ci_table = {int(k): v for k, v in document.get("compute_instance_profiles", {}).items()}
        models: dict[str, Any] = {}
        for model_id, raw in document["models"].items():
            raw = dict(raw)
            if raw.get("mig"):
                mig = dict(raw["mig"])
                mig["profiles"] = [_with_compute_instances(dict(p), ci_table) for p in mig["profiles"]]
                raw["mig"] = mig
            models[model_id] = {"model_id": model_id, **raw}
        return Catalog.model_validate({"models": models})
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise ConfigurationError(f"invalid GPU catalog: {exc}") from exc


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped with gpudra (``gpudra/hardware/gpus/catalog.yaml``), parsed once."""
    text = resources.files("gpudra.hardware.gpus").joinpath("catalog.yaml").read_text(encoding="utf-8")
    return parse_catalog(shippedyaml.load(text))

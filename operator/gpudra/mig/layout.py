"""MIG layouts: what one GPU's partitioning is (current) or should be (desired).

A layout is the MIG mode plus a set of GPU instances, each a profile name at an explicit placement start (in
memory slices). Counts-only layouts (mig-parted's ``{profile: count}``) become explicit through
:func:`gpudra.mig.validate.place_counts`. Everything here is immutable and hashable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.catalog import Catalog, GpuModel, MigModel, MigProfile, MigSpec, load_catalog
from gpudra.hardware.gpus.inventory import GpuInfo


class InvalidLayoutError(InvalidInputError):
    """A MIG layout cannot exist on the GPU model it targets. ``problems`` holds one message per reason."""

    def __init__(self, problems: Iterable[str], *, model_id: str = "") -> None:
        self.problems = tuple(problems)
        self.model_id = model_id
        where = f"invalid MIG layout for {model_id}" if model_id else "invalid MIG layout"
        super().__init__(f"{where}: " + "; ".join(self.problems))


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance of a layout: a profile at a placement start (memory slices)."""

    start: int
    profile: str

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


@dataclass(frozen=True)
class MigLayout:
    """The desired or observed partitioning of one GPU. ``instances`` is kept sorted by (start, profile)."""

    mig_enabled: bool
    instances: tuple[Placement, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(sorted(self.instances)))

    @classmethod
    def of(cls, *instances: tuple[str, int], mig_enabled: bool = True) -> MigLayout:
        """``MigLayout.of(("3g.40gb", 4), ("4g.40gb", 0))``."""
        return cls(mig_enabled, tuple(Placement(start, profile) for profile, start in instances))

    def counts(self) -> dict[str, int]:
        return dict(Counter(p.profile for p in self.instances))

    def __str__(self) -> str:
        if not self.mig_enabled:
            return "MIG disabled"
        return "[" + ", ".join(str(p) for p in self.instances) + "]"


DISABLED = MigLayout(False)
EMPTY = MigLayout(True)


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance that exists on the hardware: its placement plus the ids NVML gave it."""

    profile: str
    start: int
    gi_id: int
    uuid: str = ""

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.profile)

    def __str__(self) -> str:
        return f"{self.profile}@{self.start} (GI {self.gi_id}{', ' + self.uuid if self.uuid else ''})"


@dataclass(frozen=True)
class GpuMigState:
    """What one GPU looks like now: model, index, MIG mode and its GPU instances."""

    model_id: str
    index: int
    mig_enabled: bool
    instances: tuple[MigInstance, ...] = ()
    uuid: str = ""  # the GPU's UUID; naming it in ``in_use`` marks the whole GPU busy

    @property
    def layout(self) -> MigLayout:
        return MigLayout(self.mig_enabled, tuple(i.placement for i in self.instances))

    def in_use(self, ids: Iterable[int | str]) -> tuple[MigInstance, ...]:
        """The instances named in ``ids`` (GI ids or MIG UUIDs)."""
        wanted = set(ids)
        return tuple(i for i in self.instances if i.gi_id in wanted or (i.uuid and i.uuid in wanted))


def mig_spec(model: MigModel) -> MigSpec:
    """The model's MIG facts; InvalidLayoutError when the model has no MIG."""
    if model.mig is None:
        raise InvalidLayoutError([f"{model.model_id} does not support MIG"], model_id=model.model_id)
    return model.mig


def model_for(model_id: str, catalog: Catalog | None = None) -> GpuModel:
    """The catalog model; InvalidInputError naming the known models when there is none."""
    cat = catalog or load_catalog()
    if model_id not in cat.models:
        known = ", ".join(sorted(cat.models))
        raise InvalidInputError(f"unknown GPU model {model_id!r} (known: {known})")
    return cat.models[model_id]


def model_of_gpu(gpu: GpuInfo, catalog: Catalog | None = None) -> GpuModel | None:
    """The catalog model of a GPU read from the hardware: by PCI device id, then by product name."""
    cat = catalog or load_catalog()
    by_name = cat.by_product_name(gpu.product_name) if gpu.product_name is not None else None
    return cat.by_pci_device_id(gpu.pci_device_id) or by_name


def state_of_gpu(gpu: GpuInfo, model_id: str) -> GpuMigState:
    """The :class:`GpuMigState` of an inventory reading."""
    instances = tuple(
        sorted(
            (MigInstance(d.profile, d.placement_start, d.gi_id, d.uuid) for d in gpu.mig_devices),
            key=lambda i: (i.start, i.profile),
        )
    )
    return GpuMigState(model_id, gpu.index, gpu.mig_enabled, instances, gpu.uuid)


def span(profile: MigProfile, start: int) -> int:
    """Bit mask of the memory slices an instance of ``profile`` at ``start`` occupies."""
    return ((1 << profile.placement_size) - 1) << start


def slices_text(profile: MigProfile, start: int) -> str:
    return f"[{start}, {start + profile.placement_size})"

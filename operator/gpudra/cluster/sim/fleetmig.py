"""MIG in fleet files: explicit devices, a mig-parted config name (``all-balanced``, ``all-1g.10gb``, ...) or
mig-parted entries, turned into the MIG devices each simulated GPU starts with. Placements of counts-only forms
are chosen by gpudra's MIG planner, as a MigLayout would place them."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import model_validator

from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.catalog import Catalog, GpuModel
from gpudra.hardware.simulated.machine import GpuSpec, MachineSpec, MigInstanceSpec
from gpudra.hardware.simulated.profiles import MigEntry, SpecError
from gpudra.mig import (
    MigConfigEntry,
    MigLayout,
    default_configs,
    entry_for_gpu,
    layout_problems,
    parse_entries,
    place_counts,
)


class FleetMig(MigEntry):
    """MIG of a fleet file's profile or node group: ``devices`` (explicit, every GPU), ``config`` (a mig-parted
    config name) or ``entries`` (mig-parted entries, which may select GPUs by index)."""

    config: str | None = None
    entries: tuple[dict[str, Any], ...] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> FleetMig:
        forms = [name for name in ("devices", "config", "entries") if name in self.model_fields_set]
        if len(forms) > 1:
            raise ValueError(f"give one of devices, config or entries, not {' and '.join(forms)}")
        if not self.enabled and forms:
            raise ValueError("enabled: false turns MIG off; it takes no devices, config or entries")
        return self


def apply_mig(machine: MachineSpec, mig: FleetMig, catalog: Catalog) -> MachineSpec:
    """The machine with its GPUs' MIG state set as ``mig`` says; SpecError (path relative to ``mig``)."""
    if mig.config is not None or mig.entries is not None:
        entries = _entries(machine, mig, catalog)
        gpus = tuple(_by_entry(gpu, index, entries, catalog) for index, gpu in enumerate(machine.gpus))
    else:
        instances = tuple(MigInstanceSpec(d.profile, d.start) for d in mig.devices)
        gpus = tuple(_explicit(gpu, mig.enabled, instances, catalog) for gpu in machine.gpus)
    return dataclasses.replace(machine, gpus=gpus)


def _entries(machine: MachineSpec, mig: FleetMig, catalog: Catalog) -> tuple[MigConfigEntry, ...]:
    if mig.entries is not None:
        try:
            return parse_entries(list(mig.entries), "entries")
        except InvalidInputError as exc:
            raise SpecError(str(exc), ("entries",)) from exc
    assert mig.config is not None
    configs = default_configs(catalog).configs
    device_ids = {catalog.model(g.model_id).pci_device_id for g in machine.gpus}
    entries = configs.get(mig.config)
    if entries is None or not any(e.matches(0, d) for e in entries for d in device_ids):
        fitting = sorted(
            n for n, es in configs.items() if any(e.matches(0, d) for e in es for d in device_ids)
        )
        what = "is not a mig-parted config" if entries is None else "has no entry for these GPUs"
        raise SpecError(f"{mig.config!r} {what} (for these GPUs: {', '.join(fitting)})", ("config",))
    return entries


def _by_entry(gpu: GpuSpec, index: int, entries: tuple[MigConfigEntry, ...], catalog: Catalog) -> GpuSpec:
    model = catalog.model(gpu.model_id)
    entry = entry_for_gpu(entries, index, model.pci_device_id)
    if entry is None:
        return gpu
    where = "entries"
    if not entry.mig_enabled:
        return dataclasses.replace(gpu, mig_enabled=False, mig_pending=None, mig_devices=())
    _mig_capable(model, where)
    try:
        layout = place_counts(model, entry.counts)
    except InvalidInputError as exc:
        raise SpecError(f"GPU {index}: {exc}", (where,)) from exc
    devices = tuple(MigInstanceSpec(p.profile, p.start) for p in layout.instances)
    return dataclasses.replace(gpu, mig_enabled=True, mig_pending=None, mig_devices=devices)


def _explicit(
    gpu: GpuSpec, enabled: bool, instances: tuple[MigInstanceSpec, ...], catalog: Catalog
) -> GpuSpec:
    model = catalog.model(gpu.model_id)
    if not enabled:
        return dataclasses.replace(gpu, mig_enabled=False, mig_pending=None, mig_devices=())
    _mig_capable(model, "devices")
    layout = MigLayout.of(*((i.profile, i.start) for i in instances))
    problems = layout_problems(model, layout)
    if problems:
        raise SpecError("; ".join(problems), ("devices",))
    return dataclasses.replace(gpu, mig_enabled=True, mig_pending=None, mig_devices=instances)


def _mig_capable(model: GpuModel, where: str) -> None:
    if model.mig is None:
        raise SpecError(f"{model.product_name} ({model.model_id}) does not support MIG", (where,))

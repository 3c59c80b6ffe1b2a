"""NVIDIA mig-parted ``version: v1`` config files: strict parsing, per-GPU selection and the default configs.

A file maps config names to entries; an entry selects GPUs (``devices``: ``all`` or indexes, optionally narrowed
by ``device-filter``: PCI device ids such as ``0x233010DE``) and gives them a MIG mode and a counts-only layout
(``mig-devices``). Unknown fields are errors naming the field. When several entries select one GPU the last one
wins, as when mig-parted applies the entries in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.catalog import Catalog, MigModel, load_catalog

VERSION = "v1"
_TOP_FIELDS = frozenset({"version", "mig-configs"})
_ENTRY_FIELDS = frozenset({"device-filter", "devices", "mig-enabled", "mig-devices"})


class MigPartedConfigError(InvalidInputError):
    """A mig-parted config file (or inline entry list) is malformed; the message names the field."""


@dataclass(frozen=True)
class MigConfigEntry:
    """One entry of a mig-parted config: which GPUs, MIG on or off, and how many of each profile."""

    devices: Literal["all"] | tuple[int, ...]
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...] = ()  # sorted (profile, count) pairs
    device_filter: tuple[int, ...] = ()  # PCI device ids; empty: any model

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.mig_devices)

    def matches(self, gpu_index: int, pci_device_id: int) -> bool:
        if self.device_filter and pci_device_id not in self.device_filter:
            return False
        return self.devices == "all" or gpu_index in self.devices

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.device_filter:
            doc["device-filter"] = [f"0x{d:08X}" for d in self.device_filter]
        doc["devices"] = self.devices if self.devices == "all" else list(self.devices)
        doc["mig-enabled"] = self.mig_enabled
        if self.mig_enabled:
            doc["mig-devices"] = dict(self.mig_devices)
        return doc


@dataclass(frozen=True)
class MigPartedConfig:
    """A whole ``version: v1`` file: config name -> entries."""

    configs: Mapping[str, tuple[MigConfigEntry, ...]]
    version: str = VERSION

    def entries(self, name: str) -> tuple[MigConfigEntry, ...]:
        try:
            return self.configs[name]
        except KeyError:
            known = ", ".join(sorted(self.configs))
            raise MigPartedConfigError(f"no mig-parted config named {name!r} (known: {known})") from None

    def to_document(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "mig-configs": {
                name: [e.to_document() for e in entries] for name, entries in self.configs.items()
            },
        }


def _pci_id(value: object, where: str) -> int:
    if isinstance(value, str):
        try:
            return int(value, 16)
        except ValueError:
            pass
    raise MigPartedConfigError(f"{where}: {value!r} is not a PCI device id such as '0x233010DE'")


def parse_entry(raw: object, where: str = "entry") -> MigConfigEntry:
    """One entry in mig-parted form (``device-filter``, ``devices``, ``mig-enabled``, ``mig-devices``)."""
    if not isinstance(raw, Mapping):
        raise MigPartedConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _ENTRY_FIELDS)
    if unknown:
        raise MigPartedConfigError(
            f"{where}: unknown field {', '.join(repr(u) for u in unknown)} "
            f"(known: {', '.join(sorted(_ENTRY_FIELDS))})"
        )
    filters = raw.get("device-filter", ())
    if isinstance(filters, str):
        filters = [filters]
    if not isinstance(filters, Sequence):
        raise MigPartedConfigError(f"{where}.device-filter: expected a string or a list of strings")
    device_filter = tuple(_pci_id(v, f"{where}.device-filter") for v in filters)
    if "devices" not in raw:
        raise MigPartedConfigError(f"{where}: missing field 'devices' (all, or a list of GPU indexes)")
    devices_raw = raw["devices"]
    devices: Literal["all"] | tuple[int, ...]
    if devices_raw == "all":
        devices = "all"
    elif isinstance(devices_raw, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices_raw
    ):
        devices = tuple(devices_raw)
    else:
        raise MigPartedConfigError(
            f"{where}.devices: expected 'all' or a list of GPU indexes, got {devices_raw!r}"
        )
    enabled = raw.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise MigPartedConfigError(f"{where}: field 'mig-enabled' is required and must be true or false")
    mig_devices = raw.get("mig-devices")
    if enabled and mig_devices is None:
        raise MigPartedConfigError(
            f"{where}: field 'mig-devices' is required when mig-enabled is true ({{}} allowed)"
        )
    if mig_devices is None:
        mig_devices = {}
    if not isinstance(mig_devices, Mapping):
        raise MigPartedConfigError(f"{where}.mig-devices: expected a mapping of profile to count")
    if not enabled and mig_devices:
        raise MigPartedConfigError(f"{where}: field 'mig-devices' must be empty when mig-enabled is false")
    pairs: list[tuple[str, int]] = []
    for profile, count in mig_devices.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise MigPartedConfigError(
                f"{where}.mig-devices[{profile!r}]: count must be a non-negative integer"
            )
        pairs.append((str(profile), count))
    return MigConfigEntry(devices, enabled, tuple(sorted(pairs)), device_filter)


def parse_entries(raw: object, where: str = "entries") -> tuple[MigConfigEntry, ...]:
    """A list of entries (one mig-parted config, or a MigLayout's inline ``entries``)."""
    if not isinstance(raw, list) or not raw:
        raise MigPartedConfigError(f"{where}: expected a non-empty list of entries")
    return tuple(parse_entry(item, f"{where}[{i}]") for i, item in enumerate(raw))


def parse_mig_parted(document: object) -> MigPartedConfig:
    """A parsed YAML/JSON document in mig-parted ``version: v1`` form."""
    if not isinstance(document, Mapping):
        raise MigPartedConfigError("mig-parted config: expected a mapping with 'version' and 'mig-configs'")
    unknown = sorted(str(k) for k in document if k not in _TOP_FIELDS)
    if unknown:
        raise MigPartedConfigError(f"mig-parted config: unknown field {', '.join(repr(u) for u in unknown)}")
    if document.get("version") != VERSION:
        raise MigPartedConfigError(
            f"mig-parted config: version must be {VERSION!r}, got {document.get('version')!r}"
        )
    configs = document.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        raise MigPartedConfigError("mig-parted config: 'mig-configs' must map config names to entry lists")
    return MigPartedConfig({str(n): parse_entries(e, f"mig-configs.{n}") for n, e in configs.items()})


def entry_for_gpu(
    entries: Sequence[MigConfigEntry], gpu_index: int, pci_device_id: int
) -> MigConfigEntry | None:
    """The entry that applies to one GPU (the last one selecting it), or None: leave the GPU as it is."""
    chosen = None
    for entry in entries:
        if entry.matches(gpu_index, pci_device_id):
            chosen = entry
    return chosen


def config_name(profile: str) -> str:
    """mig-parted's name for the config giving every GPU the most instances of ``profile``."""
    return f"all-{profile.replace('+', '.')}"


def _model_entry(pci_device_id: int, counts: Mapping[str, int]) -> MigConfigEntry:
    return MigConfigEntry("all", True, tuple(sorted(counts.items())), (pci_device_id,))


def default_configs(
    catalog: Catalog | None = None, reported: Mapping[int, MigModel] | None = None
) -> MigPartedConfig:
    """mig-parted's default configs: all-disabled, all-enabled, all-balanced (per catalog model: NVML does not say
    what balanced is), and one all-<profile> per profile at its instance count, for every MIG model of the catalog
    and every model the nodes reported (``reported``: PCI device id -> MIG facts read from NVML, which stand
    for the catalog's model of that id)."""
    known = [m for m in (catalog or load_catalog()).models.values() if m.mig is not None]
    models: dict[int, MigModel] = {m.pci_device_id: m for m in known}
    models.update({pci: m for pci, m in (reported or {}).items() if m.mig is not None})
    configs: dict[str, list[MigConfigEntry]] = {
        "all-disabled": [MigConfigEntry("all", False)],
        "all-enabled": [MigConfigEntry("all", True)],
        "all-balanced": [
            _model_entry(m.pci_device_id, m.mig.all_balanced) for m in known if m.mig and m.mig.all_balanced
        ],
    }
    for pci_device_id, model in models.items():
        for profile in model.mig.profiles if model.mig else ():
            configs.setdefault(config_name(profile.name), []).append(
                _model_entry(pci_device_id, {profile.name: profile.instance_count})
            )
    return MigPartedConfig({name: tuple(entries) for name, entries in configs.items()})

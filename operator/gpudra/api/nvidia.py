"""NVIDIA's opaque device configs (apiVersion resource.nvidia.com/v1beta1), decoded strictly.

Users' claims and DeviceClasses carry these under ``config[].opaque.parameters`` for driver gpu.nvidia.com /
compute-domain.nvidia.com. Decoding is strict like NVIDIA's: an unknown field, a wrong type, or an
out-of-range value is an InvalidInputError whose message names the field path, e.g.
``sharing.mpsConfig.defaultActiveThreadPercentag: unknown field``. Each config has ``normalized()`` (fill
the implied defaults) and validation runs at decode time; ``default_config(device_type)`` is what a device
gets when no config applies. ``resolve_configs`` picks the effective config of every allocated device: class
configs first, then claim configs, a later entry wins, a config naming requests applies only to them, and a
config of the wrong kind for a device (GpuConfig on a MIG device) is an error. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpudra.api.dra import DeviceAllocationConfiguration
from gpudra.api.quantity import parse_quantity
from gpudra.errors import InvalidInputError

API_VERSION: Final = "resource.nvidia.com/v1beta1"
MIB = 2**20

DeviceType = Literal["gpu", "mig", "vfio", "channel", "daemon"]
TimeSliceInterval = Literal["Default", "Short", "Medium", "Long"]
TIME_SLICE_VALUES: dict[str, int] = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
"""The integer nvidia-smi compute-policy --set-timeslice takes for each interval."""

_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")


@dataclass(frozen=True, slots=True)
class SharingFeatures:
    """Which sharing strategies this node allows (NVIDIA's TimeSlicingSettings and MPSSupport gates)."""

    time_slicing: bool = True
    mps: bool = True


class _Strict(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _quantity_at_least_one_mib(value: str | int, what: str) -> str | int:
    try:
        amount = parse_quantity(value)
    except InvalidInputError as exc:
        raise ValueError(str(exc)) from exc
    if amount < MIB:
        raise ValueError(f"{what} must be at least 1Mi, got {value!r}")
    return value


def _mebibytes(value: str | int) -> str:
    return f"{int(parse_quantity(value)) // MIB}M"


class TimeSlicingConfig(_Strict):
    interval: TimeSliceInterval | None = None


class MpsConfig(_Strict):
    default_active_thread_percentage: int | None = None
    default_pinned_device_memory_limit: str | int | None = None
    default_per_device_pinned_memory_limit: dict[str, str | int] | None = None

    @field_validator("default_active_thread_percentage")
    @classmethod
    def _percentage(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= 100:
            raise ValueError(f"must be between 0 and 100, got {value}")
        return value

    @field_validator("default_pinned_device_memory_limit")
    @classmethod
    def _default_limit(cls, value: str | int | None) -> str | int | None:
        return None if value is None else _quantity_at_least_one_mib(value, "a pinned memory limit")

    @field_validator("default_per_device_pinned_memory_limit")
    @classmethod
    def _per_device(cls, value: dict[str, str | int] | None) -> dict[str, str | int] | None:
        for key, limit in (value or {}).items():
            if not (key.isdigit() or _UUID.match(key)):
                raise ValueError(f"key {key!r} is neither a device index nor a GPU-/MIG- UUID")
            _quantity_at_least_one_mib(limit, f"the limit for {key!r}")
        return value

    def pinned_memory_limits(self, uuids: Sequence[str]) -> dict[str, str]:
        """Per-device limits for the claim's devices (uuid -> "<MiB>M"): the default, then the per-device
        overrides keyed by UUID or by index into ``uuids``."""
        limits: dict[str, str] = {}
        if self.default_pinned_device_memory_limit is not None:
            limits = {u: _mebibytes(self.default_pinned_device_memory_limit) for u in uuids}
        for key, limit in (self.default_per_device_pinned_memory_limit or {}).items():
            if key in uuids:
                limits[key] = _mebibytes(limit)
            elif key.isdigit() and int(key) < len(uuids):
                limits[uuids[int(key)]] = _mebibytes(limit)
            else:
                raise InvalidInputError(
                    f"sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: {key!r} names no device of this "
                    f"claim (devices: {list(uuids)})"
                )
        return limits


class GpuSharing(_Strict):
    strategy: Literal["TimeSlicing", "MPS"]
    time_slicing_config: TimeSlicingConfig | None = None
    mps_config: MpsConfig | None = None

    @model_validator(mode="after")
    def _one_strategy(self) -> GpuSharing:
        if self.strategy == "TimeSlicing" and self.mps_config is not None:
            raise ValueError("mpsConfig cannot be used with strategy TimeSlicing")
        if self.strategy == "MPS" and self.time_slicing_config is not None:
            raise ValueError("timeSlicingConfig cannot be used with strategy MPS")
        return self


class MigDeviceSharing(_Strict):
    """MIG devices take TimeSlicing (no interval: the time slice is a property of the whole GPU) or MPS."""

    strategy: Literal["TimeSlicing", "MPS"]
    mps_config: MpsConfig | None = None

    @model_validator(mode="after")
    def _one_strategy(self) -> MigDeviceSharing:
        if self.strategy == "TimeSlicing" and self.mps_config is not None:
            raise ValueError("mpsConfig cannot be used with strategy TimeSlicing")
        return self


class GpuConfig(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = API_VERSION
    kind: Literal["GpuConfig"] = "GpuConfig"
    sharing: GpuSharing | None = None

    def normalized(self) -> GpuConfig:
        sharing = self.sharing or GpuSharing(strategy="TimeSlicing")
        if sharing.strategy == "TimeSlicing" and sharing.time_slicing_config is None:
            sharing = sharing.model_copy(
                update={"time_slicing_config": TimeSlicingConfig(interval="Default")}
            )
        elif sharing.strategy == "MPS" and sharing.mps_config is None:
            sharing = sharing.model_copy(update={"mps_config": MpsConfig()})
        if sharing.time_slicing_config is not None and sharing.time_slicing_config.interval is None:
            sharing = sharing.model_copy(
                update={"time_slicing_config": TimeSlicingConfig(interval="Default")}
            )
        return self.model_copy(update={"sharing": sharing})


class MigDeviceConfig(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = API_VERSION
    kind: Literal["MigDeviceConfig"] = "MigDeviceConfig"
    sharing: MigDeviceSharing | None = None

    def normalized(self) -> MigDeviceConfig:
        sharing = self.sharing or MigDeviceSharing(strategy="TimeSlicing")
        if sharing.strategy == "MPS" and sharing.mps_config is None:
            sharing = sharing.model_copy(update={"mps_config": MpsConfig()})
        return self.model_copy(update={"sharing": sharing})


class IommuConfig(_Strict):
    backend_policy: Literal["PreferIommuFD", "LegacyOnly"]
    enable_api_device: bool | None = Field(default=None, alias="enableAPIDevice")


class VfioDeviceConfig(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = API_VERSION
    kind: Literal["VfioDeviceConfig"] = "VfioDeviceConfig"
    iommu: IommuConfig | None = None

    def normalized(self) -> VfioDeviceConfig:
        iommu = self.iommu or IommuConfig(backend_policy="LegacyOnly")
        if iommu.enable_api_device is None:
            iommu = iommu.model_copy(update={"enable_api_device": False})
        return self.model_copy(update={"iommu": iommu})


CliqueProtocol = Literal["", "legacy-v1", "controller-v1"]


class ComputeDomainChannelConfig(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = API_VERSION
    kind: Literal["ComputeDomainChannelConfig"] = "ComputeDomainChannelConfig"
    domain_id: str = Field(alias="domainID", min_length=1)
    allocation_mode: Literal["", "Single", "All"] | None = None
    protocol: CliqueProtocol | None = None

    def normalized(self) -> ComputeDomainChannelConfig:
        return self.model_copy(
            update={
                "allocation_mode": self.allocation_mode or "Single",
                "protocol": self.protocol or "legacy-v1",
            }
        )


class ComputeDomainDaemonConfig(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = API_VERSION
    kind: Literal["ComputeDomainDaemonConfig"] = "ComputeDomainDaemonConfig"
    domain_id: str = Field(alias="domainID", min_length=1)
    protocol: CliqueProtocol | None = None

    def normalized(self) -> ComputeDomainDaemonConfig:
        return self.model_copy(update={"protocol": self.protocol or "legacy-v1"})


OpaqueConfig = (
    GpuConfig | MigDeviceConfig | VfioDeviceConfig | ComputeDomainChannelConfig | ComputeDomainDaemonConfig
)

KINDS: dict[str, type[OpaqueConfig]] = {
    "GpuConfig": GpuConfig,
    "MigDeviceConfig": MigDeviceConfig,
    "VfioDeviceConfig": VfioDeviceConfig,
    "ComputeDomainChannelConfig": ComputeDomainChannelConfig,
    "ComputeDomainDaemonConfig": ComputeDomainDaemonConfig,
}
DEVICE_TYPE_OF_KIND: dict[str, DeviceType] = {
    "GpuConfig": "gpu",
    "MigDeviceConfig": "mig",
    "VfioDeviceConfig": "vfio",
    "ComputeDomainChannelConfig": "channel",
    "ComputeDomainDaemonConfig": "daemon",
}
KIND_OF_DEVICE_TYPE: dict[DeviceType, str] = {t: k for k, t in DEVICE_TYPE_OF_KIND.items()}


def _path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _messages(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        # skip pydantic's union-member bookkeeping ("str", "int") in the path
        loc = tuple(p for p in error["loc"] if p not in ("str", "int"))
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] == "missing":
            message = "required field is missing"
        else:
            message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{_path(loc)}: {message}" if loc else message)
    return "; ".join(dict.fromkeys(problems))


def decode_opaque(parameters: Mapping[str, Any], *, features: SharingFeatures | None = None) -> OpaqueConfig:
    """Decode and validate one ``opaque.parameters`` object; InvalidInputError names each bad field."""
    if not isinstance(parameters, Mapping):
        raise InvalidInputError(f"opaque parameters must be an object, got {type(parameters).__name__}")
    api_version = parameters.get("apiVersion")
    if api_version != API_VERSION:
        raise InvalidInputError(f"apiVersion: must be {API_VERSION!r}, got {api_version!r}")
    kind = parameters.get("kind")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidInputError(f"kind: {kind!r} is not one of {sorted(KINDS)}")
    try:
        config = model.model_validate(dict(parameters), by_alias=True)
    except ValidationError as exc:
        raise InvalidInputError(f"{kind}: {_messages(exc)}") from exc
    _check_features(config, features or SharingFeatures())
    return config


def _check_features(config: OpaqueConfig, features: SharingFeatures) -> None:
    # not getattr(config, "sharing", None): on a model without the field pydantic's __getattr__ builds an
    # AttributeError each time, measurably slow on every prepare
    sharing = config.sharing if isinstance(config, GpuConfig | MigDeviceConfig) else None
    if sharing is None:
        return
    if sharing.strategy == "MPS" and not features.mps:
        raise InvalidInputError(
            f"{config.kind}: sharing.strategy: MPS is disabled on this node (the agent's GPUDRA_MPS_SUPPORT)"
        )
    if (
        sharing.strategy == "TimeSlicing"
        and not features.time_slicing
        and isinstance(config, GpuConfig)
        and config.sharing is not None
        and config.sharing.time_slicing_config is not None
    ):
        raise InvalidInputError(
            f"{config.kind}: sharing.timeSlicingConfig: time-slicing settings are disabled on this node (the "
            "agent's GPUDRA_TIME_SLICING_SETTINGS)"
        )


def default_config(device_type: DeviceType) -> OpaqueConfig | None:
    """What a device gets when no config applies; channels and daemons have none (domainID is required)."""
    if device_type == "gpu":
        return GpuConfig().normalized()
    if device_type == "mig":
        return MigDeviceConfig().normalized()
    if device_type == "vfio":
        return VfioDeviceConfig().normalized()
    return None


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of this driver: ``request`` as written there (``req`` or ``req/sub``)."""

    request: str
    device_name: str
    device_type: DeviceType


def _applies(requests: Sequence[str] | None, request: str) -> bool:
    return not requests or request in requests or request.split("/", 1)[0] in requests


def resolve_configs(
    configs: Sequence[DeviceAllocationConfiguration],
    devices: Sequence[AllocatedDevice],
    *,
    driver: str,
    features: SharingFeatures | None = None,
) -> list[OpaqueConfig | None]:
    """The normalized effective config of each device, in the order of ``devices``.

    Only opaque configs for ``driver`` count; each is decoded strictly even when it applies to no device, so a
    typo never passes silently. Class configs come first, then claim configs; among those that apply to a
    device the last wins. The winner must be of the device's kind.
    """
    ordered = [c for c in configs if c.source == "FromClass"] + [
        c for c in configs if c.source == "FromClaim"
    ]
    decoded: list[tuple[DeviceAllocationConfiguration, OpaqueConfig, str]] = []
    for index, entry in enumerate(ordered):
        if entry.opaque is None or entry.opaque.driver != driver:
            continue
        where = f"config from {'class' if entry.source == 'FromClass' else 'claim'} #{index}"
        if entry.requests:
            where += f" (requests {list(entry.requests)})"
        try:
            decoded.append((entry, decode_opaque(entry.opaque.parameters, features=features), where))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}: {exc}") from exc
    effective: list[OpaqueConfig | None] = []
    for device in devices:
        winner = None
        for entry, config, where in decoded:
            if _applies(entry.requests, device.request):
                winner = (config, where)
        if winner is None:
            effective.append(default_config(device.device_type))
            continue
        config, where = winner
        if DEVICE_TYPE_OF_KIND[config.kind] != device.device_type:
            raise InvalidInputError(
                f"{where}: {config.kind} cannot configure device {device.device_name} of request "
                f"{device.request!r}, which is a {device.device_type} device (use "
                f"{KIND_OF_DEVICE_TYPE[device.device_type]}, or list only the matching requests)"
            )
        effective.append(config.normalized())
    return effective

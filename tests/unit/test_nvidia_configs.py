"""NVIDIA opaque configs: strict decoding, defaults, and which config each device gets."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.dra import DeviceAllocationConfiguration, OpaqueDeviceConfiguration
from gpudra.api.nvidia import (
    API_VERSION,
    AllocatedDevice,
    ComputeDomainChannelConfig,
    GpuConfig,
    MigDeviceConfig,
    MpsConfig,
    SharingFeatures,
    VfioDeviceConfig,
    decode_opaque,
    default_config,
    resolve_configs,
)
from gpudra.errors import InvalidInputError

DRIVER = "gpu.nvidia.com"


def gpu_config(**sharing: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": sharing}


def mps(**mps_config: Any) -> dict[str, Any]:
    return gpu_config(strategy="MPS", mpsConfig=mps_config)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (
            gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}),
            GpuConfig.model_validate(
                {"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
            ),
        ),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig"}, GpuConfig()),
        ({"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}}, None),
        (
            {
                "apiVersion": API_VERSION,
                "kind": "VfioDeviceConfig",
                "iommu": {"backendPolicy": "PreferIommuFD"},
            },
            None,
        ),
        ({"apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig", "domainID": "cd-1"}, None),
        ({"apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig", "domainID": "cd-1"}, None),
    ],
)
def test_valid_configs_decode(parameters: dict[str, Any], expected: GpuConfig | None) -> None:
    config = decode_opaque(parameters)
    assert config.kind == parameters["kind"]
    assert config.to_wire() == parameters
    if expected is not None:
        assert config == expected


def test_mps_config_with_every_field() -> None:
    config = decode_opaque(
        mps(
            defaultActiveThreadPercentage=50,
            defaultPinnedDeviceMemoryLimit="10Gi",
            defaultPerDevicePinnedMemoryLimit={"0": "4Gi", "GPU-1234abcd-0000": "2Gi"},
        )
    )
    assert isinstance(config, GpuConfig)
    assert config.sharing is not None
    assert config.sharing.mps_config is not None
    limits = config.sharing.mps_config.pinned_memory_limits(["GPU-aaaa", "GPU-1234abcd-0000", "GPU-cccc"])
    assert limits == {"GPU-aaaa": "4096M", "GPU-1234abcd-0000": "2048M", "GPU-cccc": "10240M"}


def test_per_device_limit_for_a_device_not_in_the_claim_is_an_error() -> None:
    config = MpsConfig.model_validate({"defaultPerDevicePinnedMemoryLimit": {"3": "1Gi"}})
    with pytest.raises(InvalidInputError, match="'3' names no device of this claim"):
        config.pinned_memory_limits(["GPU-aaaa"])


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            mps(defaultActiveThreadPercentag=50),
            "sharing.mpsConfig.defaultActiveThreadPercentag: unknown field",
        ),
        (gpu_config(strategy="MPS", colour="red"), "sharing.colour: unknown field"),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig", "shareing": {}}, "shareing: unknown field"),
        (
            {
                "apiVersion": API_VERSION,
                "kind": "MigDeviceConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {}},
            },
            "sharing.timeSlicingConfig: unknown field",
        ),
        (
            {
                "apiVersion": API_VERSION,
                "kind": "VfioDeviceConfig",
                "iommu": {"backendPolicy": "LegacyOnly", "enableApiDevice": True},
            },
            "iommu.enableApiDevice: unknown field",
        ),
    ],
)
def test_unknown_fields_are_named(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        decode_opaque(parameters)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            mps(defaultActiveThreadPercentage=150),
            "defaultActiveThreadPercentage: must be between 0 and 100, got 150",
        ),
        (mps(defaultActiveThreadPercentage=-1), "defaultActiveThreadPercentage: must be between 0 and 100"),
        (
            mps(defaultActiveThreadPercentage="50"),
            "defaultActiveThreadPercentage: Input should be a valid integer",
        ),
        (
            mps(defaultPinnedDeviceMemoryLimit="-1Gi"),
            "defaultPinnedDeviceMemoryLimit: a pinned memory limit must be",
        ),
        (mps(defaultPinnedDeviceMemoryLimit="lots"), "'lots' is not a valid quantity"),
        (mps(defaultPerDevicePinnedMemoryLimit={"0": "512Ki"}), "the limit for '0' must be at least 1Mi"),
        (mps(defaultPerDevicePinnedMemoryLimit={"first": "1Gi"}), "'first' is neither a device index nor"),
        (gpu_config(strategy="Fabric"), "sharing.strategy: Input should be 'TimeSlicing' or 'MPS'"),
        (
            gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Forever"}),
            "interval: Input should be",
        ),
        (
            gpu_config(strategy="TimeSlicing", mpsConfig={}),
            "mpsConfig cannot be used with strategy TimeSlicing",
        ),
        (
            gpu_config(strategy="MPS", timeSlicingConfig={}),
            "timeSlicingConfig cannot be used with strategy MPS",
        ),
        (
            {"apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig"},
            "domainID: required field is missing",
        ),
        (
            {
                "apiVersion": API_VERSION,
                "kind": "ComputeDomainChannelConfig",
                "domainID": "x",
                "allocationMode": "Few",
            },
            "allocationMode: Input should be",
        ),
        ({"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"}, "apiVersion: must be"),
        ({"apiVersion": API_VERSION, "kind": "TpuConfig"}, "kind: 'TpuConfig' is not one of"),
    ],
)
def test_invalid_values_are_named(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        decode_opaque(parameters)
    assert message in str(caught.value)


def test_disabled_mps_says_so() -> None:
    with pytest.raises(InvalidInputError, match="MPS is disabled on this node"):
        decode_opaque(mps(), features=SharingFeatures(mps=False))


def test_defaults_and_normalization() -> None:
    gpu = default_config("gpu")
    assert isinstance(gpu, GpuConfig)
    assert gpu.sharing is not None
    assert gpu.sharing.strategy == "TimeSlicing"
    assert gpu.sharing.time_slicing_config is not None
    assert gpu.sharing.time_slicing_config.interval == "Default"
    mig = decode_opaque(
        {"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}}
    )
    assert isinstance(mig, MigDeviceConfig)
    normalized = mig.normalized()
    assert normalized.sharing is not None
    assert normalized.sharing.mps_config == MpsConfig()
    vfio = default_config("vfio")
    assert isinstance(vfio, VfioDeviceConfig)
    assert vfio.iommu is not None
    assert (vfio.iommu.backend_policy, vfio.iommu.enable_api_device) == ("LegacyOnly", False)
    channel = decode_opaque(
        {"apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig", "domainID": "cd"}
    )
    assert isinstance(channel, ComputeDomainChannelConfig)
    assert channel.normalized().allocation_mode == "Single"
    assert default_config("channel") is None


def entry(
    source: str, parameters: dict[str, Any], requests: list[str] | None = None, driver: str = DRIVER
) -> Any:
    return DeviceAllocationConfiguration(
        source=source,
        requests=requests,
        opaque=OpaqueDeviceConfiguration(driver=driver, parameters=parameters),
    )


SHORT = gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Short"})
LONG = gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"})
MPS = mps(defaultActiveThreadPercentage=20)


def interval(config: object) -> str | None:
    assert isinstance(config, GpuConfig)
    assert config.sharing is not None
    if config.sharing.time_slicing_config is None:
        return config.sharing.strategy
    return config.sharing.time_slicing_config.interval


def test_claim_config_overrides_class_config_whatever_the_listed_order() -> None:
    configs = [entry("FromClaim", LONG), entry("FromClass", SHORT)]
    [config] = resolve_configs(configs, [AllocatedDevice("gpu", "gpu-0", "gpu")], driver=DRIVER)
    assert interval(config) == "Long"


def test_later_entry_wins_and_requests_scope_a_config() -> None:
    configs = [
        entry("FromClaim", SHORT),
        entry("FromClaim", LONG),
        entry("FromClaim", MPS, requests=["train"]),
    ]
    devices = [
        AllocatedDevice("infer", "gpu-0", "gpu"),
        AllocatedDevice("train/big", "gpu-1", "gpu"),  # a firstAvailable subrequest matches its base name
        AllocatedDevice("train", "gpu-2", "gpu"),
    ]
    assert [interval(c) for c in resolve_configs(configs, devices, driver=DRIVER)] == ["Long", "MPS", "MPS"]


def test_no_config_gives_the_default_and_other_drivers_are_ignored() -> None:
    configs = [entry("FromClaim", {"whatever": True}, driver="other.example.com")]
    [config] = resolve_configs(configs, [AllocatedDevice("gpu", "gpu-0", "gpu")], driver=DRIVER)
    assert config == default_config("gpu")


def test_gpu_config_on_a_mig_device_is_an_error() -> None:
    configs = [entry("FromClaim", MPS)]
    with pytest.raises(InvalidInputError) as caught:
        resolve_configs(configs, [AllocatedDevice("slice", "gpu-0-mig-1g12gb-19-0", "mig")], driver=DRIVER)
    message = str(caught.value)
    assert "GpuConfig cannot configure device gpu-0-mig-1g12gb-19-0" in message
    assert "mig device" in message
    assert "use MigDeviceConfig" in message


def test_mig_config_on_a_full_gpu_is_an_error() -> None:
    configs = [entry("FromClaim", {"apiVersion": API_VERSION, "kind": "MigDeviceConfig"}, requests=["gpu"])]
    with pytest.raises(InvalidInputError, match="MigDeviceConfig cannot configure device gpu-0"):
        resolve_configs(configs, [AllocatedDevice("gpu", "gpu-0", "gpu")], driver=DRIVER)


def test_mixed_claim_is_fine_when_configs_name_their_requests() -> None:
    configs = [
        entry("FromClaim", MPS, requests=["whole"]),
        entry("FromClaim", {"apiVersion": API_VERSION, "kind": "MigDeviceConfig"}, requests=["slice"]),
    ]
    devices = [
        AllocatedDevice("whole", "gpu-0", "gpu"),
        AllocatedDevice("slice", "gpu-1-mig-1g12gb-19-0", "mig"),
    ]
    gpu, mig = resolve_configs(configs, devices, driver=DRIVER)
    assert isinstance(gpu, GpuConfig)
    assert isinstance(mig, MigDeviceConfig)


def test_bad_config_is_reported_even_if_it_applies_to_no_device() -> None:
    configs = [entry("FromClaim", mps(bogus=1), requests=["elsewhere"])]
    with pytest.raises(InvalidInputError) as caught:
        resolve_configs(configs, [AllocatedDevice("gpu", "gpu-0", "gpu")], driver=DRIVER)
    assert "config from claim #0 (requests ['elsewhere'])" in str(caught.value)
    assert "sharing.mpsConfig.bogus: unknown field" in str(caught.value)

"""Hand-built NVIDIA-style devices for the CEL tests (attribute names as NVIDIA's DRA driver publishes)."""

from __future__ import annotations

from typing import Any

from gpudra.allocator.cel.selectors import CelDevice, cel_device
from gpudra.api.dra import Device

DRIVER = "gpu.nvidia.com"


def gpu(name: str, product: str, arch: str, cc: str, memory: str, *, uuid: str, **extra: Any) -> Device:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "uuid": {"string": uuid},
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": arch},
        "cudaComputeCapability": {"version": cc},
        "driverVersion": {"version": "550.54.15"},
        "resource.kubernetes.io/pciBusID": {"string": f"0000:{abs(hash(uuid)) % 256:02x}:00.0"},
    }
    attributes.update(extra)
    return Device.model_validate(
        {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}
    )


def mig(name: str, profile: str, memory: str, *, parent: str) -> Device:
    attributes: dict[str, Any] = {
        "type": {"string": "mig"},
        "profile": {"string": profile},
        "parentUUID": {"string": parent},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "550.54.15"},
    }
    capacity = {
        "memory": {"value": memory},
        "multiprocessors": {"value": "16" if profile == "1g.10gb" else "60"},
    }
    return Device.model_validate({"name": name, "attributes": attributes, "capacity": capacity})


def fleet() -> dict[str, CelDevice]:
    """Six devices keyed h100, a100-40, a100-80, l4, mig-1g, mig-3g."""
    devices = {
        "h100": gpu("gpu-0", "NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "80Gi", uuid="GPU-h100"),
        "a100-40": gpu("gpu-1", "NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", "40Gi", uuid="GPU-a100a"),
        "a100-80": gpu("gpu-2", "NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", "80Gi", uuid="GPU-a100b"),
        "l4": gpu("gpu-3", "NVIDIA L4", "Ada Lovelace", "8.9.0", "23034Mi", uuid="GPU-l4"),
        "mig-1g": mig("gpu-4-mig-1g10gb-19-0", "1g.10gb", "10Gi", parent="GPU-h100b"),
        "mig-3g": mig("gpu-4-mig-3g40gb-9-4", "3g.40gb", "40Gi", parent="GPU-h100b"),
    }
    return {key: cel_device(DRIVER, device) for key, device in devices.items()}


FLEET_FACTORY = fleet

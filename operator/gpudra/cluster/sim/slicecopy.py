"""A real node's GPUs from what its ResourceSlices publish: the reverse of :mod:`gpudra.devices.build`.

Both gpudra and NVIDIA's DRA driver publish one pool per node with the same device names and attributes
(``gpu-<minor>`` with ``uuid``, ``productName``, ``resource.kubernetes.io/pciBusID``, ...; MIG devices
``gpu-<minor>-mig-<profile>-<giProfileId>-<start>`` with ``parentUUID`` and ``profile``), so a node's devices say
which GPUs it has, where they sit, which MIG instances exist and which driver runs. The NVLink clique comes from
gpudra's ``gpudra.dev/cliqueID`` attribute or the Node's ``nvidia.com/gpu.clique`` label. Devices without a
``uuid`` (dynamic MIG offers) are not instances and are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudra.devices import CLIQUE_ID, NUMA_NODE, NVLINK_COUNT, PCI_BUS_ID, PCIE_ROOT, parse_mig_device_name
from gpudra.errors import ConfigurationError
from gpudra.hardware.gpus.catalog import Catalog
from gpudra.hardware.simulated.machine import GpuSpec, MachineSpec, MigInstanceSpec
from gpudra.hardware.simulated.profiles import FabricReading, GpuSlot

CLIQUE_LABEL = "nvidia.com/gpu.clique"
_GPU_NAME = re.compile(r"^gpu-(\d+)$")
_FABRIC_COMPLETED, _FABRIC_SUCCESS = 3, 0


@dataclass
class _Gpu:
    minor: int
    attributes: dict[str, Any] = field(
        default_factory=dict
    )  # the GPU's (or its MIG devices' shared) attributes
    uuid: str | None = None
    mig: list[MigInstanceSpec] = field(default_factory=list)


def attribute(device: Mapping[str, Any], name: str, driver: str) -> Any:
    """The value of a device attribute, by its bare or qualified name (``productName``, ``gpu.nvidia.com/...``)."""
    attributes = device.get("attributes") or {}
    value = attributes.get(name, attributes.get(f"{driver}/{name}"))
    if not isinstance(value, Mapping):
        return None
    return next(iter(value.values()), None)


def machine_of_devices(
    node: str, devices: Sequence[Mapping[str, Any]], labels: Mapping[str, str], driver: str, catalog: Catalog
) -> tuple[MachineSpec, list[str]]:
    """The node's machine, and notes on what was left out."""
    gpus: dict[int, _Gpu] = {}
    notes: list[str] = []
    for device in devices:
        name = str(device.get("name", ""))
        kind = attribute(device, "type", driver)
        whole = _GPU_NAME.match(name)
        if kind == "gpu" and whole:
            gpu = gpus.setdefault(int(whole.group(1)), _Gpu(int(whole.group(1))))
            gpu.uuid = attribute(device, "uuid", driver)
            gpu.attributes = dict(device.get("attributes") or {})
            continue
        mig = parse_mig_device_name(name) if kind == "mig" else None
        if mig is None:
            continue  # not a GPU: a ComputeDomain channel or daemon, a VFIO device, ...
        mig_uuid = attribute(device, "uuid", driver)
        if mig_uuid is None:
            notes.append(f"{node}/{name}: a dynamic MIG offer, not an instance; left out")
            continue
        gpu = gpus.setdefault(mig[0], _Gpu(mig[0]))
        gpu.attributes = gpu.attributes or dict(device.get("attributes") or {})
        gpu.uuid = gpu.uuid or attribute(device, "parentUUID", driver)
        gpu.mig.append(MigInstanceSpec(str(attribute(device, "profile", driver)), mig[2], str(mig_uuid)))
    if not gpus:
        raise ConfigurationError(f"node {node} publishes no GPU of driver {driver}")
    specs = [_spec(node, gpu, labels, driver, catalog) for _, gpu in sorted(gpus.items())]
    first = specs[0]
    return MachineSpec(
        gpus=tuple(s for s, _ in specs),
        driver_version=first[1][0],
        cuda_driver_version=_cuda(first[1][1]),
    ), notes


def _spec(
    node: str, gpu: _Gpu, labels: Mapping[str, str], driver: str, catalog: Catalog
) -> tuple[GpuSpec, tuple[str, str]]:
    device = {"attributes": gpu.attributes}
    product = attribute(device, "productName", driver)
    model = catalog.by_product_name(str(product))
    if model is None:
        raise ConfigurationError(
            f"node {node}: gpu-{gpu.minor} is a {product!r}, which gpudra's GPU catalog does not know "
            "(operator/gpudra/hardware/gpus/catalog.yaml)"
        )
    if gpu.uuid is None:
        raise ConfigurationError(f"node {node}: gpu-{gpu.minor} publishes no uuid")
    clique = attribute(device, CLIQUE_ID, driver) or labels.get(CLIQUE_LABEL)
    numa = attribute(device, NUMA_NODE, driver)
    nvlinks = attribute(device, NVLINK_COUNT, driver)
    spec = GpuSpec(
        model_id=model.model_id,
        slot=GpuSlot(
            str(attribute(device, PCI_BUS_ID, driver)), _int(numa), attribute(device, PCIE_ROOT, driver)
        ),
        uuid=str(gpu.uuid),
        minor=gpu.minor,
        mig_enabled=bool(gpu.mig),
        mig_devices=tuple(sorted(gpu.mig, key=lambda m: m.start)),
        fabric=_fabric(str(clique)) if clique else None,
        addressing_mode=attribute(device, "addressingMode", driver),
        nvlink_count=_int(nvlinks),
    )
    versions = (
        str(attribute(device, "driverVersion", driver)),
        str(attribute(device, "cudaDriverVersion", driver)),
    )
    return spec, versions


def _fabric(clique: str) -> FabricReading | None:
    cluster, _, clique_id = clique.rpartition(".")
    if not cluster or not clique_id.isdigit():
        return None
    return FabricReading(cluster, int(clique_id), _FABRIC_COMPLETED, _FABRIC_SUCCESS)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else None


def _cuda(version: str) -> int:
    parts = [*version.split("."), "0", "0"][:2]
    return 1000 * int(parts[0]) + 10 * int(parts[1]) if all(p.isdigit() for p in parts) else 13000

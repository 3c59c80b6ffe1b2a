"""The GPU driver's plan of a claim (gpudra.agent.gpuplanner), from models alone: which hardware each result names,
the GPUs that go to vfio-pci first, and the device metadata files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudra.agent.gpuplanner import LatestTargets, PrepareOptions, plan_gpu_claim
from gpudra.api.dra import ResourceClaim
from gpudra.errors import PrepareError
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu
from gpudra.hardware.simulated import simulated_backend

NODE = "n1"
DRIVER = "gpu.nvidia.com"
UID = "c-1"


def reading(profile: str) -> tuple[NodeInventory, tuple[PciGpu, ...]]:
    backend = simulated_backend(profile, NODE).backend
    return backend.read_inventory(), backend.pci_gpus()


def claim(*devices: str) -> ResourceClaim:
    results = [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": "train", "namespace": "team-a", "uid": UID},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def plan_of(
    profile: str,
    *devices: str,
    passthrough: bool = False,
    dynamic_first: bool = False,
    **options: Any,
) -> Any:
    inventory, pci = reading(profile)
    model = claim(*devices)
    assert model.status is not None and model.status.allocation is not None
    results = model.status.allocation.devices.results if model.status.allocation.devices else []
    return plan_gpu_claim(
        UID, model, results or [], inventory, driver=DRIVER,
        options=PrepareOptions(passthrough=passthrough, **{k: v for k, v in options.items() if k != "data_dir"}),
        dynamic={inventory.gpus[0].uuid} if dynamic_first else frozenset(),
        pci_gpus=pci if passthrough else (), data_dir=options.get("data_dir"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("profile", "device", "options", "uuid_of_gpu", "device_type", "device_node"),
    [
        ("dgx-h100", "gpu-1", {}, 1, "gpu", "/dev/nvidia1"),
        ("dgx-a100", "gpu-0-mig-1g5gb-19-2", {}, 0, "mig", "/dev/nvidia0"),
        ("dgx-a100", "gpu-0", {"dynamic_first": True}, 0, "gpu", "/dev/nvidia0"),  # a GPU in dynamic MIG mode
        ("dgx-h100", "gpu-vfio-0", {"passthrough": True}, None, "vfio", "/dev/vfio/27"),
    ],
)  # fmt: skip
def test_each_result_is_planned_on_the_hardware_it_names(
    profile: str,
    device: str,
    options: dict[str, Any],
    uuid_of_gpu: int | None,
    device_type: str,
    device_node: str,
) -> None:
    inventory, _ = reading(profile)
    plan = plan_of(profile, device, **options).claim
    (record,) = plan.devices
    assert (record.device_name, record.device_type, record.request_names) == (device, device_type, ["gpu"])
    if uuid_of_gpu is not None:
        assert plan.gpu_uuids[device] == inventory.gpus[uuid_of_gpu].uuid
    paths = [
        n["path"] for d in plan.cdi_document["devices"] for n in d["containerEdits"].get("deviceNodes", [])
    ]
    assert any(p.endswith(device_node) for p in paths), paths


def test_a_mig_devices_capabilities_are_numbered_so_that_the_host_need_not_have_them() -> None:
    """On a real node the kernel has ``nvidia-caps`` devices but /dev/nvidia-caps holds only the nodes somebody
    made (``nvidia-modprobe -f``): a CDI spec naming a host path the host lacks stops the container at its creation,
    so the capabilities are character devices of the kernel's major and their own minor, made in the container.
    The parent GPU's node is the host's, under the device root. Without a major (a simulated node): paths."""
    device = "gpu-1-mig-1g5gb-19-2"  # dgx-a100: GPU 1's third 1g.5gb, GPU instance 9, compute instance 0

    def nodes(**options: Any) -> list[dict[str, Any]]:
        (entry,) = plan_of("dgx-a100", device, **options).claim.cdi_document["devices"]
        return list(entry["containerEdits"]["deviceNodes"])

    gi_minor = 3 + 1 * 135 + 9 * 9  # /proc/driver/nvidia-caps/mig-minors: gpu1/gi9/access
    assert nodes(dev_root="/run/nvidia/driver", mig_caps_major=511) == [
        {"path": "/dev/nvidia1", "hostPath": "/run/nvidia/driver/dev/nvidia1"},
        {"path": f"/dev/nvidia-caps/nvidia-cap{gi_minor}", "type": "c", "major": 511, "minor": gi_minor,
         "fileMode": 0o444},
        {"path": f"/dev/nvidia-caps/nvidia-cap{gi_minor + 1}", "type": "c", "major": 511, "minor": gi_minor + 1,
         "fileMode": 0o444},
    ]  # fmt: skip
    assert [n.get("hostPath") for n in nodes(dev_root="/run/nvidia/driver")] == [
        "/run/nvidia/driver/dev/nvidia1",
        f"/run/nvidia/driver/dev/nvidia-caps/nvidia-cap{gi_minor}",
        f"/run/nvidia/driver/dev/nvidia-caps/nvidia-cap{gi_minor + 1}",
    ]


@pytest.mark.parametrize(
    ("devices", "passthrough", "bound"),
    [
        (("gpu-vfio-0",), True, ["0000:1b:00.0"]),
        (("gpu-0",), True, []),
        (("gpu-0", "gpu-1"), False, []),
    ],
)
def test_only_passthrough_devices_are_bound_to_vfio_pci(
    devices: tuple[str, ...], passthrough: bool, bound: list[str]
) -> None:
    plan = plan_of("dgx-h100", *devices, passthrough=passthrough)
    assert [(b.pci_bus_id, b.device_name) for b in plan.vfio_bindings] == list(
        zip(bound, [d for d in devices if d.startswith("gpu-vfio")], strict=True)
    )


@pytest.mark.parametrize(
    ("profile", "devices", "options", "reason"),
    [
        ("dgx-h100", ("gpu-9",), {}, "UnknownDevice"),  # a DGX H100 has eight GPUs
        ("dgx-h100", ("gpu-vfio-0",), {}, "UnknownDevice"),  # passthrough off: no vfio device here
        ("dgx-a100", ("gpu-0",), {}, "UnknownDevice"),  # a MIG-enabled GPU is whole only in dynamic MIG mode
        ("dgx-h100", ("gpu-vfio-0", "gpu-3"), {"passthrough": True}, "InvalidConfig"),  # one claim for each
    ],
)  # fmt: skip
def test_a_result_the_node_cannot_serve_is_refused(
    profile: str, devices: tuple[str, ...], options: dict[str, Any], reason: str
) -> None:
    with pytest.raises(PrepareError) as caught:
        plan_of(profile, *devices, **options)
    assert caught.value.reason == reason
    assert devices[-1] in str(caught.value)


@pytest.mark.parametrize(
    ("metadata", "with_dir", "files"),
    [(True, True, 1), (True, False, 0), (False, True, 0)],
)
def test_device_metadata_files_are_planned_only_when_on_and_there_is_a_place_for_them(
    tmp_path: Path, metadata: bool, with_dir: bool, files: int
) -> None:
    plan = plan_of(
        "dgx-h100", "gpu-0", device_metadata=metadata, data_dir=tmp_path if with_dir else None
    ).claim
    assert len(plan.metadata_files) == files
    assert all(Path(p).is_relative_to(tmp_path) for p in plan.metadata_files)
    assert not list(tmp_path.iterdir())  # planned, not written
    cdi_ids = plan.devices[0].cdi_device_ids
    assert len(cdi_ids) == 1 + files  # the metadata CDI device is named by the request's first device


def test_targets_of_a_reading_are_shared_and_follow_the_next_reading() -> None:
    """Prepares that share a reading of the GPUs share its device targets; a newer reading (a MIG device
    created meanwhile) or another set of dynamic GPUs is never answered from the older one."""
    backend = simulated_backend("dgx-h100", NODE).backend
    latest = LatestTargets()
    first = backend.read_inventory()
    targets = latest(first, frozenset(), ())
    assert latest(first, frozenset(), ()) is targets
    assert not any(name.startswith("gpu-0-mig") for name in targets)
    gpu = first.gpus[0]
    backend.set_mig_mode(gpu.index, True)
    backend.create_mig_device(gpu.index, "1g.10gb", 0)
    second = backend.read_inventory()
    assert "gpu-0-mig-1g10gb-19-0" in latest(second, frozenset(), ())
    assert "gpu-0" not in latest(second, frozenset(), ())
    assert "gpu-0" in latest(second, {gpu.uuid}, ())


def test_a_later_reading_of_unchanged_gpus_keeps_the_targets() -> None:
    """Prepares one after another each wait for a reading of their own; the GPUs did not change in between."""
    backend = simulated_backend("dgx-h100", NODE).backend
    backend.set_mig_mode(0, True)
    backend.create_mig_device(0, "1g.10gb", 0)
    latest = LatestTargets()
    targets = latest(backend.read_inventory(), frozenset(), ())
    assert latest(backend.read_inventory(), frozenset(), ()) is targets
    backend.create_mig_device(0, "1g.10gb", 1)
    assert "gpu-0-mig-1g10gb-19-1" in latest(backend.read_inventory(), frozenset(), ())

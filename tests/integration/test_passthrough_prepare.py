"""Prepare of passthrough devices over the kubelet plugin's sockets, on a simulated node: the GPU goes to
vfio-pci and back, a crash at any step leaves it either prepared on vfio-pci or back on nvidia with no claim, a busy
GPU is refused, and the CDI spec follows the claim's VfioDeviceConfig."""

from __future__ import annotations

from typing import Any

import pytest
from _prepare_kit import DRIVER, Node, crash_and_restart

from gpudra.hardware.simulated import nvml_types as t

VFIO = "gpu-vfio-2"


@pytest.fixture
def node(idle_prepare_node: Node) -> Node:
    idle_prepare_node.passthrough = True
    return idle_prepare_node


def driver_of(node: Node, position: int) -> str | None:
    return node.backend.pci_gpus()[position].driver


def nodes_of(spec: dict[str, Any]) -> list[str]:
    edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]
    return [n["path"] for e in edits for n in e.get("deviceNodes", [])]


async def test_prepare_binds_to_vfio_and_unprepare_gives_the_gpu_back(node: Node) -> None:
    await node.start()
    assert node.kubelet is not None
    ref = await node.claim("vm", {"gpu": VFIO})
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert driver_of(node, 2) == "vfio-pci"
    assert len(node.backend.read_inventory().gpus) == 7
    spec = node.spec_of(ref)
    assert spec is not None
    assert nodes_of(spec) == [f"/dev/vfio/{node.backend.pci_gpus()[2].iommu_group}"]
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert driver_of(node, 2) == "nvidia" and node.spec_of(ref) is None
    assert len(node.backend.read_inventory().gpus) == 8


async def test_the_api_device_comes_with_enable_api_device(node: Node) -> None:
    await node.start()
    assert node.kubelet is not None
    config = {
        "source": "FromClaim",
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "VfioDeviceConfig",
                "iommu": {"backendPolicy": "LegacyOnly", "enableAPIDevice": True},
            },
        },
    }
    ref = await node.claim("vm", {"gpu": VFIO}, config=[config])
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    spec = node.spec_of(ref)
    assert spec is not None and "/dev/vfio/vfio" in nodes_of(spec)


async def test_a_busy_gpu_is_refused_and_left_where_it_is(node: Node) -> None:
    await node.start()
    assert node.kubelet is not None
    position = next(i for i, g in enumerate(node.backend.read_inventory().gpus) if g.pci_bus_id
                    == node.backend.pci_gpus()[2].pci_bus_id)  # fmt: skip
    node.fake.set_processes(position, 1)
    ref = await node.claim("vm", {"gpu": VFIO})
    error = (await node.kubelet.prepare([ref]))[ref.uid].error
    assert "runs 1 compute processes" in error
    assert driver_of(node, 2) == "nvidia"
    assert node.preparer is not None and node.preparer.store.get(ref.uid) is None


async def test_a_claim_mixing_passthrough_and_container_devices_is_refused(node: Node) -> None:
    await node.start()
    assert node.kubelet is not None
    ref = await node.claim("mixed", {"vm": VFIO, "ctr": "gpu-0"})
    assert "mixes passthrough devices" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert driver_of(node, 2) == "nvidia"


@pytest.mark.parametrize(
    ("operation", "step", "bound_after_restart"),
    [
        ("prepare", "vfio_planned", False),
        ("prepare", "vfio_bound", False),
        ("prepare", "cdi_written", False),
        ("prepare", "prepare_completed", True),
        ("unprepare", "cdi_deleted", False),
        ("unprepare", "vfio_released", False),
    ],
)
async def test_crash_points(node: Node, operation: str, step: str, bound_after_restart: bool) -> None:
    ref = await node.claim("vm", {"gpu": VFIO})
    await crash_and_restart(node, ref, operation, step)
    assert node.preparer is not None and node.kubelet is not None
    recorded = node.preparer.store.get(ref.uid)
    assert (recorded is not None) == bound_after_restart
    assert driver_of(node, 2) == ("vfio-pci" if bound_after_restart else "nvidia")
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert driver_of(node, 2) == "vfio-pci"
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert driver_of(node, 2) == "nvidia"


async def test_a_reboot_that_gave_the_gpu_back_binds_it_again(node: Node) -> None:
    await node.start()
    assert node.kubelet is not None
    ref = await node.claim("vm", {"gpu": VFIO})
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    node.fake.pci_bus.set_driver(node.backend.pci_gpus()[2].pci_bus_id, "nvidia")  # the reboot
    await node.restart()
    assert driver_of(node, 2) == "vfio-pci"


async def test_a_bind_that_fails_after_the_unbind_gives_the_gpu_back_at_once(node: Node) -> None:
    """The GPU leaves the nvidia driver, then vfio-pci refuses it (NVIDIA's driver left such GPUs with no driver):
    the prepare fails, the GPU is back on nvidia and in NVML, no claim is recorded, and the retry binds it."""
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("vm", {"gpu": VFIO})
    node.fake.fail_bind(2, "vfio-pci")
    assert "cannot bind" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert driver_of(node, 2) == "nvidia"
    assert len(node.backend.read_inventory().gpus) == 8
    assert node.preparer.store.get(ref.uid) is None and node.spec_of(ref) is None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert driver_of(node, 2) == "vfio-pci"


async def test_a_gpu_left_with_no_driver_is_given_back_by_the_next_prepare_or_a_restart(node: Node) -> None:
    """vfio-pci refuses the GPU and so, at once, does the nvidia driver: the GPU has no driver (offered neither to
    containers nor for passthrough) and the claim stays recorded; the kubelet's retry first finishes that
    rollback, as does a restart."""
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("vm", {"gpu": VFIO})
    node.fake.fail_bind(2, "vfio-pci")
    node.fake.fail_bind(2, "nvidia", times=2)  # the prepare's own give-back, and its rollback's
    assert "to nvidia" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert driver_of(node, 2) is None and len(node.backend.read_inventory().gpus) == 7
    assert node.preparer.store.claims()[ref.uid].state == "PrepareStarted"

    report = await node.restart()
    assert ref.uid in report.rolled_back
    assert driver_of(node, 2) == "nvidia" and len(node.backend.read_inventory().gpus) == 8
    assert node.preparer.store.get(ref.uid) is None

    node.fake.fail_bind(2, "vfio-pci")
    node.fake.fail_bind(2, "nvidia", times=2)
    assert "to nvidia" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""  # the retry gives it back, then binds
    assert driver_of(node, 2) == "vfio-pci"


async def test_a_gpu_nvml_cannot_read_is_not_passed_through(node: Node) -> None:
    """Whether the GPU holds MIG instances or runs processes cannot be known while NVML cannot read it: it stays
    on nvidia."""
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    node.fake.inject_call("nvmlDeviceGetMigMode", gpu=2, error=t.NVMLError_Unknown)
    ref = await node.claim("vm", {"gpu": VFIO})
    assert "cannot be checked" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert driver_of(node, 2) == "nvidia" and node.preparer.store.get(ref.uid) is None

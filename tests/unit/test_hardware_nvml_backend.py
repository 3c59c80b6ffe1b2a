"""NvmlBackend over the simulated NVML: the inventory a node publishes, MIG changes, errors, health events."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pynvml
import pytest

import gpudra.hardware.nvml.backend as nvml_module
from gpudra.errors import (
    HardwareError,
    HardwareInsufficientResources,
    HardwareInUse,
    HardwareInvalidArgument,
    HardwareNotFound,
    HardwareNotSupported,
)
from gpudra.hardware.gpus.backend import GpuBackend, HealthEventKind
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.hardware.nvml.backend import NvmlBackend, sysfs_pcie_root
from gpudra.hardware.nvml.gpu import normalize_pci_bus_id
from gpudra.hardware.simulated import SimulatedNode, simulated_backend
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.hardware.simulated.profiles import NODE_PROFILES, ProfileEntry, profile_names, resolve_entry

MIB = 2**20


@pytest.fixture
def dgx_a100() -> SimulatedNode:
    return simulated_backend("dgx-a100", "dgx-a100-0")


@pytest.fixture
def dgx_h100() -> SimulatedNode:
    return simulated_backend("dgx-h100", "dgx-h100-0")


def test_backend_satisfies_the_protocol(dgx_h100: SimulatedNode) -> None:
    assert isinstance(dgx_h100.backend, GpuBackend)


def test_dgx_a100_inventory_has_the_all_balanced_mig_devices(dgx_a100: SimulatedNode) -> None:
    inventory = dgx_a100.backend.read_inventory()
    assert inventory.node_name == "dgx-a100-0"
    assert (inventory.driver_version, inventory.cuda_driver_version) == ("580.95.05", "13.0")
    assert len(inventory.gpus) == 8
    all_uuids = set()
    for gpu in inventory.gpus:
        assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_pending) == (True, True, True)
        layout = [(d.profile, d.placement_start, d.placement_size, d.gi_profile_id) for d in gpu.mig_devices]
        assert layout == [
            ("2g.10gb", 0, 2, 14),
            ("1g.5gb", 2, 1, 19),
            ("1g.5gb", 3, 1, 19),
            ("3g.20gb", 4, 4, 9),
        ]
        assert [d.gi_id for d in gpu.mig_devices] == [3, 9, 10, 2]
        for device in gpu.mig_devices:
            assert device.uuid.startswith("MIG-")
            assert (device.parent_uuid, device.parent_index, device.parent_minor) == (
                gpu.uuid,
                gpu.index,
                gpu.minor,
            )
            all_uuids.add(device.uuid)
        three_g = gpu.mig_devices[3]
        assert (three_g.memory_bytes, three_g.multiprocessors, three_g.copy_engines, three_g.decoders) == (
            19968 * MIB,
            42,
            3,
            2,
        )
        assert three_g.ci_profile_id == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE
    assert len(all_uuids) == 32
    first = inventory.gpus[0]
    assert (first.product_name, first.architecture, first.cuda_compute_capability) == (
        "NVIDIA A100-SXM4-40GB",
        "Ampere",
        "8.0",
    )
    assert first.fabric is None  # Ampere reports no fabric info
    assert first.nvlink_count == 12


def test_dgx_h100_inventory(dgx_h100: SimulatedNode) -> None:
    inventory = dgx_h100.backend.read_inventory()
    assert len(inventory.gpus) == 8
    for gpu in inventory.gpus:
        assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_devices) == (True, False, ())
        assert gpu.product_name == "NVIDIA H100 80GB HBM3"
        assert (gpu.architecture, gpu.brand, gpu.cuda_compute_capability) == ("Hopper", "Nvidia", "9.0")
        assert gpu.memory_bytes == 81559 * MIB
        assert gpu.multiprocessors == 0  # NVML reports SM counts of MIG devices only (as recorded)
        assert gpu.nvlink_count == 18
        assert gpu.pci_device_id == 0x233010DE
        assert gpu.fabric is not None
        assert gpu.fabric.clique is None
        assert gpu.numa_node == (0 if gpu.index < 4 else 1)
        assert gpu.addressing_mode == "HMM"
    assert inventory.gpus[0].pci_bus_id == "0000:1b:00.0"
    assert inventory.gpus[0].pcie_root == "pci0000:15"
    assert dgx_h100.backend.read_inventory() == inventory  # readings of an unchanged node are equal


def test_l4_is_published_without_mig() -> None:
    node = simulated_backend("l4x4", "l4-0")
    gpus = node.backend.read_inventory().gpus
    assert len(gpus) == 4
    assert all(not g.mig_capable and not g.mig_enabled and g.architecture == "Ada Lovelace" for g in gpus)
    assert node.backend.mig_profiles(0) == ()
    with pytest.raises(HardwareNotSupported, match="enable MIG on GPU 0 of node l4-0") as caught:
        node.backend.set_mig_mode(0, True)
    assert caught.value.code == "NVML_ERROR_NOT_SUPPORTED"
    assert isinstance(caught.value.__cause__, t.NVMLError)


def test_gb200_trays_form_one_clique_per_rack() -> None:
    def cliques(fleet_index: int) -> set[str | None]:
        inventory = simulated_backend(
            "gb200-nvl72", f"gb200-{fleet_index}", fleet_index
        ).backend.read_inventory()
        assert len(inventory.gpus) == 4
        return {g.fabric.clique if g.fabric else None for g in inventory.gpus}

    rack0_first, rack0_last, rack1 = cliques(0), cliques(17), cliques(18)
    assert len(rack0_first) == 1
    assert None not in rack0_first
    assert rack0_first == rack0_last
    assert rack1 != rack0_first
    assert None not in rack1


def test_mig_profiles_list_placements(dgx_a100: SimulatedNode) -> None:
    profiles = {p.profile: p for p in dgx_a100.backend.mig_profiles(0)}
    assert set(profiles) == {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}
    assert profiles["3g.20gb"].placements == (0, 4)
    assert profiles["3g.20gb"].placement_size == 4
    assert profiles["1g.5gb+me"].instance_count == 1
    assert profiles["7g.40gb"].memory_bytes == 40192 * MIB


def test_create_and_destroy_change_the_next_inventory(dgx_h100: SimulatedNode) -> None:
    backend = dgx_h100.backend
    result = backend.set_mig_mode(3, True)
    assert result.active
    assert result.activation_code == "NVML_SUCCESS"
    created = backend.create_mig_device(3, "3g.40gb", 4)
    assert (created.profile, created.placement_start, created.gi_id, created.parent_index) == (
        "3g.40gb",
        4,
        2,
        3,
    )
    small = backend.create_mig_device(3, "1g.10gb+me", 0)
    gpu = backend.read_inventory().gpus[3]
    assert [d.uuid for d in gpu.mig_devices] == [small.uuid, created.uuid]
    assert small.ofa_engines == 1
    backend.destroy_mig_device(3, created.gi_id)
    assert [d.profile for d in backend.read_inventory().gpus[3].mig_devices] == ["1g.10gb+me"]
    backend.destroy_mig_device(3, small.gi_id)
    assert backend.set_mig_mode(3, False).current is False


def test_mig_errors_map_to_project_errors(dgx_a100: SimulatedNode) -> None:
    backend = dgx_a100.backend
    with pytest.raises(
        HardwareInsufficientResources, match=r"create MIG device 2g\.10gb at placement 2 on GPU 1"
    ) as ex:
        backend.create_mig_device(1, "2g.10gb", 2)  # slices 2-3 hold two 1g.5gb
    assert ex.value.__cause__ is not None
    assert getattr(ex.value.__cause__, "value", None) == 23
    with pytest.raises(HardwareInvalidArgument, match=r"valid starts: 0, 4"):
        backend.create_mig_device(1, "3g.20gb", 2)
    with pytest.raises(HardwareInvalidArgument, match=r"no MIG profile '9g\.80gb'"):
        backend.create_mig_device(1, "9g.80gb", 0)
    with pytest.raises(HardwareNotFound, match="destroy MIG GPU instance 5 on GPU 1"):
        backend.destroy_mig_device(1, 5)
    with pytest.raises(HardwareInUse):
        backend.set_mig_mode(1, False)  # instances still exist


def test_destroy_cleans_a_gpu_instance_left_without_compute_instance(dgx_a100: SimulatedNode) -> None:
    nvml, backend = dgx_a100.nvml, dgx_a100.backend
    nvml.nvmlInit()  # the test is a second NVML client on the node
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    gi = nvml.nvmlDeviceGetGpuInstanceById(handle, 9)
    ci = nvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    nvml.nvmlComputeInstanceDestroy(ci)  # as if a crash happened between the two steps
    assert len(backend.read_inventory().gpus[0].mig_devices) == 3
    backend.destroy_mig_device(0, 9)
    assert 9 not in nvml.gpu(0).gpu_instances


def test_mig_mode_change_pending_until_reset(dgx_h100: SimulatedNode) -> None:
    dgx_h100.nvml.set_processes(6, 1)
    result = dgx_h100.backend.set_mig_mode(6, True)
    assert (result.current, result.pending, result.reset_required) == (False, True, True)
    assert result.activation_code == "NVML_ERROR_IN_USE"
    assert dgx_h100.backend.read_inventory().gpus[6].mig_pending
    dgx_h100.nvml.set_processes(6, 0)
    dgx_h100.nvml.reset_gpu(6)
    gpu = dgx_h100.backend.read_inventory().gpus[6]
    assert (gpu.mig_enabled, gpu.mig_pending) == (True, True)


def test_health_events(dgx_h100: SimulatedNode) -> None:
    backend, nvml = dgx_h100.backend, dgx_h100.nvml
    assert backend.wait_health_event(0) is None
    nvml.inject_xid(2, 79)
    event = backend.wait_health_event(0)
    assert event is not None
    assert (event.kind, event.gpu_index, event.xid, event.gi_id) == (HealthEventKind.XID, 2, 79, None)
    assert event.gpu_uuid == backend.read_inventory().gpus[2].uuid
    nvml.inject_ecc(1)
    event = backend.wait_health_event(0)
    assert event is not None
    assert (event.kind, event.gpu_index) == (HealthEventKind.DOUBLE_BIT_ECC, 1)


def test_health_wait_in_a_thread_sees_a_later_xid(dgx_h100: SimulatedNode) -> None:
    backend = dgx_h100.backend
    assert backend.wait_health_event(0) is None  # registers the event set
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(backend.wait_health_event(60)))
    waiter.start()
    dgx_h100.nvml.inject_xid(7, 48, gi_id=3, ci_id=0)
    waiter.join(60)
    assert seen
    assert seen[0] is not None
    assert (seen[0].gpu_index, seen[0].xid, seen[0].gi_id, seen[0].ci_id) == (7, 48, 3, 0)


def test_lost_gpu_is_reported_and_left_out_of_the_inventory(dgx_h100: SimulatedNode) -> None:
    backend = dgx_h100.backend
    assert backend.wait_health_event(0) is None
    dgx_h100.nvml.lose_gpu(4)
    event = backend.wait_health_event(0)
    assert event is not None
    assert (event.kind, event.gpu_index) == (HealthEventKind.GPU_LOST, 4)
    assert [g.index for g in backend.read_inventory().gpus] == [0, 1, 2, 3, 5, 6, 7]


def test_a_gpu_lost_again_after_coming_back_is_reported_again(dgx_h100: SimulatedNode) -> None:
    backend = dgx_h100.backend
    assert backend.wait_health_event(0) is None
    for _ in range(2):
        dgx_h100.nvml.lose_gpu(4)
        event = backend.wait_health_event(0)
        assert event is not None
        assert (event.kind, event.gpu_index) == (HealthEventKind.GPU_LOST, 4)
        dgx_h100.nvml.restore_gpu(4)
        assert len(backend.read_inventory().gpus) == 8


def test_a_lost_gpu_is_logged_once_then_once_a_minute(
    dgx_h100: SimulatedNode, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inventory is read several times a second: a lost GPU said so at every read (4 lines a second)."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    dgx_h100.nvml.lose_gpu(4)
    with caplog.at_level(logging.WARNING, logger=nvml_module.__name__):
        for _ in range(20):
            dgx_h100.backend.read_inventory()
            clock[0] += 0.25
        assert len([r for r in caplog.records if "is lost" in r.getMessage()]) == 1
        clock[0] += nvml_module.LOST_LOG_SECONDS
        dgx_h100.backend.read_inventory()
        assert len([r for r in caplog.records if "is lost" in r.getMessage()]) == 2
        dgx_h100.nvml.restore_gpu(4)
        dgx_h100.backend.read_inventory()
        dgx_h100.nvml.lose_gpu(4)
        dgx_h100.backend.read_inventory()  # lost again after it came back: said at once
        assert len([r for r in caplog.records if "is lost" in r.getMessage()]) == 3


def test_close_shuts_nvml_down(dgx_h100: SimulatedNode) -> None:
    dgx_h100.backend.read_inventory()
    dgx_h100.backend.close()
    with pytest.raises(t.NVMLError_Uninitialized):
        dgx_h100.nvml.nvmlDeviceGetCount()
    assert len(dgx_h100.backend.read_inventory().gpus) == 8  # re-initialises on use


def test_real_pynvml_without_a_driver_reports_a_hardware_error() -> None:
    backend = NvmlBackend("no-gpu-node")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # a machine with an NVIDIA driver: nothing to check here
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is loaded")
    with pytest.raises(HardwareError, match="initialise NVML of node no-gpu-node") as caught:
        backend.read_inventory()
    assert caught.value.code.startswith("NVML_ERROR_")


def test_pci_bus_id_is_normalized_for_kubernetes() -> None:
    assert normalize_pci_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    # the ignore below: bytes, as older NVML bindings return the bus id
    assert normalize_pci_bus_id(b"00000008:01:00.0") == "0008:01:00.0"  # type: ignore[arg-type]


def test_sysfs_pcie_root(tmp_path: Path) -> None:
    device_dir = tmp_path / "devices" / "pci0000:15" / "0000:15:01.0" / "0000:1b:00.0"
    device_dir.mkdir(parents=True)
    links = tmp_path / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    (links / "0000:1b:00.0").symlink_to(device_dir)
    assert sysfs_pcie_root("0000:1b:00.0", sysfs=tmp_path) == "pci0000:15"
    assert sysfs_pcie_root("0000:99:00.0", sysfs=tmp_path) is None


def test_backend_built_directly_on_fake_nvml_resolves_pcie_roots() -> None:
    fake = FakeNvml.from_profile("dgx-a100", node_name="direct-0", fleet_index=0)
    gpus = NvmlBackend("direct-0", nvml=fake).read_inventory().gpus
    assert [g.pcie_root for g in gpus[:4]] == ["pci0000:00", "pci0000:00", "pci0000:40", "pci0000:40"]
    assert {"dgx-a100", "dgx-h100", "gb200-nvl72", "l4x4"} <= set(profile_names())


def _peers(node: SimulatedNode) -> dict[str, set[str]]:
    return {gpu.uuid: set(gpu.nvlink_peers) for gpu in node.backend.read_inventory().gpus}


@pytest.mark.parametrize("profile", ["dgx-h100", "hgx-h200", "dgx-b200", "dgx-a100-80gb", "gb200-nvl72"])
def test_nvswitch_boards_make_every_gpu_an_nvlink_peer_of_every_other(profile: str) -> None:
    peers = _peers(simulated_backend(profile, f"{profile}-0"))
    assert len(peers) > 1
    for gpu_uuid, others in peers.items():
        assert others == set(peers) - {gpu_uuid}


def test_pcie_cards_without_bridges_have_no_nvlink_peers() -> None:
    assert all(not others for others in _peers(simulated_backend("l4x4", "l4-0")).values())


def test_bridged_pairs_reach_only_their_partner() -> None:
    entry = ProfileEntry.model_validate({"name": "a30-bridged", "base": "a30x4", "nvlink": "bridged-pairs"})
    profile = resolve_entry(entry, NODE_PROFILES, load_catalog())
    node = simulated_backend(profile, "a30-0")
    uuids = [gpu.uuid for gpu in node.backend.read_inventory().gpus]
    assert _peers(node) == {
        uuids[0]: {uuids[1]},
        uuids[1]: {uuids[0]},
        uuids[2]: {uuids[3]},
        uuids[3]: {uuids[2]},
    }


def test_a_lost_gpu_is_no_ones_nvlink_peer(dgx_h100: SimulatedNode) -> None:
    lost_uuid = dgx_h100.backend.read_inventory().gpus[3].uuid
    dgx_h100.nvml.lose_gpu(3)
    peers = _peers(dgx_h100)
    assert lost_uuid not in peers
    assert all(lost_uuid not in others and len(others) == 6 for others in peers.values())

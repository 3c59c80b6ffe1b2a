"""Which devices the health watcher calls unhealthy: repelling taints and lost GPUs, never effect-None events."""

from __future__ import annotations

from gpudra.agent.health import HealthState
from gpudra.devices.dynamic import build_node_devices
from gpudra.devices.offer import with_taints
from gpudra.hardware.gpus.backend import HealthEvent, HealthEventKind
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import FakeNvml


def inventory(profile: str = "dgx-a100") -> NodeInventory:
    return NvmlBackend(
        "n", nvml=FakeNvml.from_profile(profile, node_name="n", fleet_index=0)
    ).read_inventory()


def xid(node: NodeInventory, gpu: int, value: int) -> HealthEvent:
    return HealthEvent(kind=HealthEventKind.XID, gpu_index=gpu, gpu_uuid=node.gpus[gpu].uuid, xid=value)


def test_critical_xid_makes_the_gpu_and_its_mig_devices_unhealthy_ignored_xid_does_not() -> None:
    node = inventory()
    state = HealthState()
    state.record(xid(node, 0, 13), now=1.0)
    assert state.problems(node) == {}
    state.record(xid(node, 1, 48), now=2.0)
    problems = state.problems(node)
    assert "gpu-1" in problems and len(problems) > 1
    assert all(name.startswith("gpu-1") for name in problems)
    assert {p.reason for p in problems.values()} == {"Xid48"}


def test_single_bit_ecc_is_not_a_problem_double_bit_is() -> None:
    node = inventory("dgx-h100")
    state = HealthState()
    uuid = node.gpus[2].uuid
    state.record(HealthEvent(kind=HealthEventKind.SINGLE_BIT_ECC, gpu_index=2, gpu_uuid=uuid), now=1.0)
    assert state.problems(node) == {}
    state.record(HealthEvent(kind=HealthEventKind.DOUBLE_BIT_ECC, gpu_index=2, gpu_uuid=uuid), now=2.0)
    assert {n: p.reason for n, p in state.problems(node).items()} == {"gpu-2": "EccDoubleBit"}


def test_a_lost_gpu_stays_unhealthy_until_a_later_reading_shows_it() -> None:
    node = inventory("dgx-h100")
    state = HealthState()
    state.remember(node, read_at=0.0)
    lost = node.gpus[5]
    state.record(HealthEvent(kind=HealthEventKind.GPU_LOST, gpu_index=5, gpu_uuid=lost.uuid), now=10.0)
    without = node.model_copy(update={"gpus": tuple(g for g in node.gpus if g.uuid != lost.uuid)})
    assert not state.remember(without, read_at=11.0)
    assert {n: p.reason for n, p in state.problems(without).items()} == {"gpu-5": "GpuLost"}
    assert not state.remember(node, read_at=9.0)  # a reading that started before the loss proves nothing
    assert state.remember(node, read_at=12.0)
    assert state.problems(node) == {}


def test_taints_with_effect_none_are_left_out_for_a_server_that_does_not_know_them() -> None:
    """Kubernetes 1.34 refuses a slice with a None taint: with ``informational=False`` only repelling taints go out."""
    node = inventory("dgx-h100")
    state = HealthState()
    state.record(xid(node, 0, 13), now=1.0)
    state.record(xid(node, 1, 79), now=1.0)
    devices = build_node_devices(node, {}).devices
    taints = state.taints_for(node, devices)

    def effects(informational: bool) -> tuple[list[str], list[str]]:
        by_name = {
            d.name: [str(t.effect) for t in d.taints or ()]
            for d in with_taints(devices, taints, informational=informational)
        }
        return by_name["gpu-0"], by_name["gpu-1"]

    assert effects(True) == (["None"], ["NoSchedule"])
    assert effects(False) == ([], ["NoSchedule"])


def test_xids_that_mean_a_dead_gpu_taint_noexecute_when_configured() -> None:
    node = inventory("dgx-h100")
    state = HealthState(evicting_xids=frozenset({79, 13}))
    for gpu, value in ((0, 79), (1, 48), (2, 13)):
        state.record(xid(node, gpu, value), now=1.0)
    taints = state.taints_for(node, build_node_devices(node, {}).devices)
    effects = {name: [t.effect for t in ts] for name, ts in taints.items()}
    # listed: NoExecute, even when the XID is also an ignored one; others as before
    assert effects == {"gpu-0": ["NoExecute"], "gpu-1": ["NoSchedule"], "gpu-2": ["NoExecute"]}
    assert {n: p.reason for n, p in state.problems(node).items()} == {
        "gpu-0": "Xid79",
        "gpu-1": "Xid48",
        "gpu-2": "Xid13",
    }


def test_a_lost_gpu_stays_published_tainted_noexecute_when_configured_until_it_is_back() -> None:
    node = inventory("dgx-a100")  # MIG devices on GPU 0 in the profile's default layout
    devices = build_node_devices(node, {}).devices
    state = HealthState(evict_lost_gpus=True)
    state.remember(node, read_at=0.0)
    state.remember_published(devices)
    lost = node.gpus[0]
    state.record(HealthEvent(kind=HealthEventKind.GPU_LOST, gpu_index=0, gpu_uuid=lost.uuid), now=10.0)
    without = node.model_copy(update={"gpus": tuple(g for g in node.gpus if g.uuid != lost.uuid)})
    state.remember(without, read_at=11.0)
    state.remember_published(build_node_devices(without, {}).devices)  # the next publication lacks the GPU
    again = state.lost_published()
    mine = [d.name for d in devices if d.name == "gpu-0" or d.name.startswith("gpu-0-")]
    assert sorted(d.name for d in again) == sorted(mine) and mine
    assert all(
        [(t.key, t.value, t.effect, t.time_added) for t in d.taints or ()]
        == [("gpu.nvidia.com/gpu-lost", lost.uuid, "NoExecute", "1970-01-01T00:00:10Z")]
        and not d.consumes_counters
        for d in again
    )
    state.remember(node, read_at=12.0)
    assert state.lost_published() == []


def test_a_lost_gpu_leaves_the_slices_by_default() -> None:
    node = inventory("dgx-h100")
    state = HealthState()
    state.remember_published(build_node_devices(node, {}).devices)
    state.record(HealthEvent(kind=HealthEventKind.GPU_LOST, gpu_index=3, gpu_uuid=node.gpus[3].uuid), now=1.0)
    assert state.lost_published() == []

"""Faults on a simulated node (cluster/sim/faults.py): which GPU or MIG device a name means, what NVML then
reports, and the clear refusals."""

from __future__ import annotations

import pytest

from gpudra.cluster.sim.faults import FaultRejected, inject, parse_fault
from gpudra.hardware.gpus.backend import HealthEventKind
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import FakeNvml


@pytest.fixture
def fleet() -> dict[str, FakeNvml]:
    return {
        "a100": FakeNvml.from_profile("dgx-a100", node_name="a100"),
        "tray": FakeNvml.from_profile("gb200-nvl72", node_name="tray"),
    }


def fault(node: str, device: str | int, kind: str, xid: int | None = None) -> dict[str, object]:
    body: dict[str, object] = {"nodeName": node, "device": device, "fault": kind}
    if xid is not None:
        body["xid"] = xid
    return body


def test_an_xid_on_a_mig_device_reaches_the_agent_as_that_gpu_instance(fleet: dict[str, FakeNvml]) -> None:
    backend = NvmlBackend("a100", fleet["a100"])
    assert backend.wait_health_event(0) is None  # the health watcher listens
    outcome = inject(fleet, parse_fault(fault("a100", "gpu-1-mig-1g5gb-19-2", "Xid", 48)))
    assert outcome.heard and "XID 48 on MIG GPU instance" in outcome.message
    event = backend.wait_health_event(1)
    assert event is not None
    gi = next(g for g in fleet["a100"].gpu(1).gpu_instances.values() if g.start == 2)
    assert (event.kind, event.xid, event.gpu_index, event.gi_id) == (HealthEventKind.XID, 48, 1, gi.gi_id)


def test_an_event_nobody_watches_is_lost_and_said_so(fleet: dict[str, FakeNvml]) -> None:
    outcome = inject(fleet, parse_fault(fault("a100", 3, "EccDoubleBit")))
    assert not outcome.heard
    assert "no NVML event set watched GPU 3" in outcome.message


def test_lost_gpu_then_recover(fleet: dict[str, FakeNvml]) -> None:
    inject(fleet, parse_fault(fault("a100", "gpu-2", "GpuLost")))
    assert fleet["a100"].gpu(2).lost
    with pytest.raises(FaultRejected, match="lost already"):
        inject(fleet, parse_fault(fault("a100", "gpu-2", "Xid", 79)))
    recovered = inject(fleet, parse_fault(fault("a100", "all", "Recover"))).message
    assert recovered == f"recovered on a100: GPU 2 ({fleet['a100'].gpu(2).uuid}) answers again"
    assert not fleet["a100"].gpu(2).lost
    assert "nothing to recover" in inject(fleet, parse_fault(fault("a100", "all", "Recover"))).message


def test_a_tray_leaves_its_fabric_and_comes_back(fleet: dict[str, FakeNvml]) -> None:
    assert (
        "GPUs 0, 1, 2, 3 of tray left"
        in inject(fleet, parse_fault(fault("tray", "all", "FabricLost"))).message
    )
    assert {fleet["tray"].fabric_state(i) for i in range(4)} == {1}  # NOT_STARTED
    inject(fleet, parse_fault(fault("tray", "all", "Recover")))
    assert {fleet["tray"].fabric_state(i) for i in range(4)} == {3}  # COMPLETED


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (fault("nope", 0, "GpuLost"), "no simulated node 'nope' (nodes: a100, tray)"),
        (fault("a100", "gpu-8", "GpuLost"), "a100 has no GPU gpu-8 (its GPUs: gpu-0, gpu-1"),
        (fault("a100", "gpu-0-mig-1g5gb-19-6", "Xid", 1), "has no MIG device gpu-0-mig-1g5gb-19-6"),
        (fault("a100", "gpu-0-mig-1g5gb-19-2", "GpuLost"), "a MIG device cannot be lost alone"),
        (fault("a100", "disk-0", "GpuLost"), "expected gpu-N, a MIG device name"),
        (fault("a100", 0, "FabricLost"), "is not registered in an NVLink fabric"),
        (fault("a100", 0, "Xid"), "an Xid fault needs the XID code"),
        (fault("a100", 0, "GpuLost", 79), "only an Xid fault takes an XID code"),
        (fault("a100", 0, "Melt"), "fault: Input should be 'Xid'"),
        ({"device": 0, "fault": "GpuLost"}, "nodeName: Field required"),
    ],
)
def test_faults_that_cannot_happen_say_why(
    fleet: dict[str, FakeNvml], body: dict[str, object], message: str
) -> None:
    with pytest.raises(FaultRejected, match=message.replace("(", r"\(").replace(")", r"\)")):
        inject(fleet, parse_fault(body))

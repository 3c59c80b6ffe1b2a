"""The agent's MIG applier on the simulated NVML (FakeNvml through NvmlBackend): it reaches exactly the desired
layout, never destroys a device a claim holds, resumes after a crash at any step, and reports a pending GPU reset
instead of retrying it."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.agent.migdynamic.instances import MigInstances
from gpudra.agent.miglayout.applier import MigApplier
from gpudra.agent.miglayout.journal import PlanJournal
from gpudra.agent.prepareplan import DeviceKey, device_targets
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.mig.desired import DesiredState, NodeReport
from gpudra.mig.keep import place_for_gpu
from gpudra.mig.layout import MigLayout, state_of_gpu
from gpudra.mig.space import placement_space
from gpudra.mig.validate import place_counts
from nvmlkit import p2p_queries

NODE = "node-a"
CATALOG = load_catalog()
H100 = CATALOG.model("H100-SXM5-80GB")
A100 = CATALOG.model("A100-SXM4-40GB")


class Holders:
    """The preparer's side as the applier sees it: devices held by claims, and reservations."""

    def __init__(self, held: dict[DeviceKey, str] | None = None) -> None:
        self.held = dict(held or {})
        self.reserved: dict[str, set[DeviceKey]] = {}

    def holders(self) -> dict[DeviceKey, str]:
        return dict(self.held)

    def reserve_devices(self, holder: str, keys: Collection[DeviceKey]) -> list[str]:
        claims = sorted({self.held[k] for k in keys if k in self.held})
        if not claims:
            self.reserved[holder] = set(keys)
        return claims

    def release_devices(self, holder: str) -> None:
        self.reserved.pop(holder, None)


class Crash(Exception):
    """The agent process dies here."""


class CrashingBackend:
    """Delegates to a backend and raises Crash instead of the (k+1)-th hardware change."""

    def __init__(self, inner: NvmlBackend, after: int) -> None:
        self._inner = inner
        self.node_name = inner.node_name
        self.left = after

    def _change(self) -> None:
        if self.left == 0:
            raise Crash
        self.left -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> Any:
        self._change()
        return self._inner.set_mig_mode(gpu_index, enabled)

    def create_mig_device(self, gpu_index: int, profile: str, placement_start: int) -> Any:
        self._change()
        return self._inner.create_mig_device(gpu_index, profile, placement_start)

    def destroy_mig_device(self, gpu_index: int, gi_id: int) -> None:
        self._change()
        self._inner.destroy_mig_device(gpu_index, gi_id)


def desired(
    counts_by_gpu: dict[int, dict[str, int] | None], name: str = "layout", generation: int = 1
) -> DesiredState:
    entries = [
        {
            "devices": [i],
            "mig-enabled": counts is not None,
            **({"mig-devices": counts} if counts is not None else {}),
        }
        for i, counts in counts_by_gpu.items()
    ]
    return DesiredState(source="MigLayout", name=name, generation=generation, entries=tuple(entries))


def layouts(inventory: NodeInventory) -> dict[int, MigLayout]:
    return {g.index: state_of_gpu(g, "").layout for g in inventory.gpus}


def applier(backend: Any, tmp: Path, holders: Holders | None = None) -> MigApplier:
    return MigApplier(backend, PlanJournal(tmp / "mig-plan.json", node=NODE), node=NODE, holders=holders)


def apply(a: MigApplier, want: DesiredState) -> NodeReport:
    return asyncio.run(a.apply(want))[0]


H100_COUNTS = [
    space_layout.counts()
    for space_layout in map(placement_space(H100).layout_of, placement_space(H100).layouts)
]


@given(
    first=st.sampled_from(H100_COUNTS),
    second=st.one_of(st.none(), st.sampled_from(H100_COUNTS)),
    held_mask=st.integers(0, 127),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_applying_reaches_exactly_the_desired_layout_and_keeps_held_devices(
    tmp_path: Path, first: dict[str, int], second: dict[str, int] | None, held_mask: int
) -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    holders = Holders()
    a = applier(backend, tmp_path, holders)
    assert apply(a, desired({0: first})).state == "success"
    assert layouts(backend.read_inventory())[0] == place_counts(H100, first)

    inventory = backend.read_inventory()
    named = device_targets(inventory)
    mig = [t for t in named.values() if t.device_type == "mig" and t.gpu_uuid == inventory.gpus[0].uuid]
    held = {t.uuid for i, t in enumerate(mig) if held_mask >> i & 1}
    holders.held = {(NODE, t.name): f"ns/claim-{t.uuid[-4:]}" for t in mig if t.uuid in held}
    before = state_of_gpu(inventory.gpus[0], "H100-SXM5-80GB")
    report = apply(a, desired({0: second}, generation=2))

    after = backend.read_inventory()
    present = {d.uuid for d in after.gpus[0].mig_devices}
    assert held <= present, "a held MIG device was destroyed"
    expected = (
        place_for_gpu(H100, before, place_counts(H100, second), held)
        if second is not None
        else MigLayout(False)
    )
    assert second is None or expected.counts() == {p: n for p, n in second.items() if n}
    if report.state == "success":
        assert layouts(after)[0] == expected
    else:
        assert report.state == "blocked"
        assert set(report.blocked_by) <= set(holders.held.values()) and report.blocked_by
        assert layouts(after)[0] == place_counts(H100, first), "a blocked node must not change at all"
    assert layouts(after)[1] == MigLayout(False), "GPUs no entry selects are left alone"


TRANSITIONS = [
    # (node profile, desired per GPU): MIG enable + creations; destroys + creations; disable
    ("dgx-h100", {0: {"1g.10gb": 7}, 1: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}),
    ("dgx-a100", {0: {"3g.20gb": 2}, 1: {"7g.40gb": 1}}),
    ("dgx-a100", {0: None}),
]


@pytest.mark.parametrize(("profile", "want"), TRANSITIONS)
def test_a_crash_after_any_step_resumes_and_converges(
    tmp_path: Path, profile: str, want: dict[int, dict[str, int] | None]
) -> None:
    model = H100 if profile == "dgx-h100" else A100
    expected = {i: place_counts(model, c) if c is not None else MigLayout(False) for i, c in want.items()}
    total = None
    crash_at = 0
    while total is None or crash_at < total:
        fake = FakeNvml.from_profile(profile, node_name=NODE)
        backend = NvmlBackend(NODE, nvml=fake)
        state_dir = tmp_path / f"crash-{crash_at}"
        crashing = CrashingBackend(backend, after=crash_at)
        try:
            report = apply(applier(crashing, state_dir), desired(want))
            total = crash_at  # no crash: every change was made
            assert report.state == "success"
            break
        except Crash:
            assert (state_dir / "mig-plan.json").exists(), "the plan is checkpointed before the steps"
        report = apply(applier(backend, state_dir), desired(want))  # the restarted agent
        assert report.state == "success", report.message
        current = layouts(backend.read_inventory())
        assert {i: current[i] for i in want} == expected
        assert not (state_dir / "mig-plan.json").exists(), "a finished plan leaves no checkpoint"
        crash_at += 1
    assert crash_at >= 3, "the transitions take several steps"


def test_a_crash_between_a_gpu_instance_and_its_compute_instance_is_cleared_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # killed inside a create step: the GPU instance exists, its compute instance does not, so no MIG device shows
    # it; the resumed plan's create at that placement fails until start-up recovery destroys the bare instance
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    backend.set_mig_mode(0, True)
    want = desired({0: {"3g.40gb": 2}})

    def killed(*args: object) -> None:
        raise Crash

    monkeypatch.setattr(fake, "nvmlGpuInstanceCreateComputeInstance", killed)
    with pytest.raises(Crash):
        apply(applier(backend, tmp_path), want)
    monkeypatch.undo()
    (bare,) = backend.gpu_instances(0)
    assert (bare.profile, bare.compute_instances) == ("3g.40gb", 0)
    assert layouts(backend.read_inventory())[0] == MigLayout(True)  # no MIG device shows it
    assert apply(applier(backend, tmp_path), want).state == "failed"  # "memory slices overlap"

    assert MigInstances(backend).destroy_bare() == 1  # the agent's start-up recovery
    assert apply(applier(backend, tmp_path), want).state == "success"
    assert layouts(backend.read_inventory())[0] == place_counts(H100, {"3g.40gb": 2})
    assert [g.compute_instances for g in backend.gpu_instances(0)] == [1, 1]


def test_a_mig_mode_change_waiting_for_a_reset_is_reported_not_retried(tmp_path: Path) -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    fake.require_reset_for_mig_change(0)
    backend = NvmlBackend(NODE, nvml=fake)
    calls = CrashingBackend(backend, after=1000)
    a = applier(calls, tmp_path)
    want = desired({0: {"3g.40gb": 2}})
    first = apply(a, want)
    assert first.state == "pending"
    assert "reset" in first.message
    made = 1000 - calls.left
    again = apply(a, want)
    assert (again.state, 1000 - calls.left) == ("pending", made), (
        "no second mode change while the reset waits"
    )
    fake.reset_gpu(0)
    assert apply(a, want).state == "success"
    assert layouts(backend.read_inventory())[0] == place_counts(H100, {"3g.40gb": 2})


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"4g.40gb": 2}, "too many 4g.40gb: 2 requested, H100-SXM5-80GB allows at most 1"),
        ({"1g.5gb": 1}, "unknown MIG profile '1g.5gb' for H100-SXM5-80GB"),
    ],
)
def test_an_invalid_layout_is_reported_and_the_hardware_untouched(
    tmp_path: Path, counts: dict[str, int], message: str
) -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    before = backend.read_inventory()
    report = apply(applier(backend, tmp_path), desired({0: {"1g.10gb": 1}, 1: counts}))
    assert report.state == "invalid"
    assert "GPU 1: " in report.message and message in report.message
    assert backend.read_inventory() == before


def test_dynamic_policy_enables_mig_and_hands_the_gpus_to_the_agent(tmp_path: Path) -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    marked: list[frozenset[str] | None] = []
    a = MigApplier(
        backend, PlanJournal(tmp_path / "p.json", node=NODE), node=NODE, mark_dynamic=marked.append
    )
    want = desired({0: {}, 1: {}}).model_copy(update={"policy": "Dynamic"})
    assert apply(a, want).state == "success"
    inventory = backend.read_inventory()
    assert [g.mig_enabled for g in inventory.gpus[:3]] == [True, True, False]
    assert not inventory.gpus[0].mig_devices, "dynamic GPUs get instances at prepare, not from the layout"
    assert marked[-1] == frozenset({inventory.gpus[0].uuid, inventory.gpus[1].uuid})
    assert apply(a, desired({2: {"7g.80gb": 1}}, generation=2)).state == "success"
    assert marked[-1] == frozenset(), "a Static layout takes the GPUs back from dynamic MIG"


@pytest.mark.parametrize("allow_partial", [False, True])
def test_held_devices_block_the_node_or_with_allow_partial_are_worked_around(
    tmp_path: Path, allow_partial: bool
) -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    holders = Holders()
    a = applier(backend, tmp_path, holders)
    small = {"1g.10gb": 7}
    assert apply(a, desired({0: small, 1: small})).state == "success"
    holders.held = {(NODE, "gpu-0-mig-1g10gb-19-0"): "ns/inference"}  # GPU 0's 1g.10gb at slice 0
    halves = {"3g.40gb": 2}
    want = desired({0: halves, 1: halves}, generation=2).model_copy(update={"allow_partial": allow_partial})

    report = apply(a, want)
    assert (report.state, report.blocked_by) == ("blocked", ("ns/inference",))
    now = layouts(backend.read_inventory())
    if allow_partial:
        assert now[1] == place_counts(H100, halves), "a free GPU is changed"
        assert now[0] == MigLayout.of(("1g.10gb", 0), ("3g.40gb", 4)), (
            "the held instance is kept, the rest fits"
        )
        assert "not applied: 3g.40gb@0" in report.message
    else:
        assert now[0] == now[1] == place_counts(H100, small), "nothing changes while the node is blocked"
    holders.held = {}
    assert apply(a, want).state == "success"
    assert layouts(backend.read_inventory())[0] == place_counts(H100, halves)


def test_a_gpu_with_the_wanted_counts_in_other_placements_is_left_alone_even_when_in_use(
    tmp_path: Path,
) -> None:
    """mig-parted compares counts: instances made by hand (or by another tool) in other placements are kept, and a
    claim on one of them does not block a layout the GPU already has."""
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    backend.set_mig_mode(0, True)
    backend.create_mig_device(0, "1g.10gb", 6)  # mig-parted's own placement of one 1g.10gb would be start 0
    assert place_counts(H100, {"1g.10gb": 1}) != MigLayout.of(("1g.10gb", 6))
    inventory = backend.read_inventory()
    (held,) = [t for t in device_targets(inventory).values() if t.device_type == "mig"]
    holders = Holders()
    holders.held = {(NODE, held.name): "ns/busy"}

    report = apply(applier(backend, tmp_path, holders), desired({0: {"1g.10gb": 1}}))

    assert report.state == "success"
    assert layouts(backend.read_inventory())[0] == MigLayout.of(("1g.10gb", 6))


def test_a_layout_names_gpus_by_minor_while_an_earlier_gpu_is_on_vfio(tmp_path: Path) -> None:
    """GPU 0 bound to vfio-pci moves the NVML indices of the others down by one; the layout's GPU 3 (the minor,
    as the device name gpu-3) is still the GPU configured, and the dynamic hand-off names the right GPUs."""
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    before = {g.minor: g for g in backend.read_inventory().gpus}
    backend.bind_vfio(before[0].pci_bus_id)
    a = applier(backend, tmp_path)
    report = apply(a, desired({3: {"3g.40gb": 2}}))
    assert report.state == "success", report.message
    after = {g.minor: g for g in backend.read_inventory().gpus}
    assert layouts(backend.read_inventory())[2] == place_counts(H100, {"3g.40gb": 2})  # NVML index 2: minor 3
    assert after[3].uuid == before[3].uuid and after[3].mig_enabled
    assert [m for m, g in after.items() if g.mig_enabled] == [3], "no other GPU touched"
    marked: list[frozenset[str] | None] = []
    dynamic = MigApplier(
        backend, PlanJournal(tmp_path / "d.json", node=NODE), node=NODE, mark_dynamic=marked.append
    )
    want = desired({5: {}}, generation=2).model_copy(update={"policy": "Dynamic"})
    assert apply(dynamic, want).state == "success"
    assert marked[-1] == frozenset({before[5].uuid})


def test_a_gpu_instance_destroyed_while_the_instances_are_listed_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # two claims' unprepares on one GPU, on two threads: one lists the GPU instances while the other destroys one
    # of them; the listing gives the instances that are still there instead of failing the unprepare
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    backend.set_mig_mode(0, True)
    first = backend.create_mig_device(0, "1g.10gb", 0)
    second = backend.create_mig_device(0, "1g.10gb", 1)
    info = fake.nvmlGpuInstanceGetInfo

    def destroyed_meanwhile(gi: object) -> object:
        monkeypatch.setattr(fake, "nvmlGpuInstanceGetInfo", info)
        backend.destroy_mig_device(
            0, first.gi_id
        )  # the other thread's destroy, between the list and this call
        return info(gi)

    monkeypatch.setattr(fake, "nvmlGpuInstanceGetInfo", destroyed_meanwhile)
    assert [g.gi_id for g in backend.gpu_instances(0)] == [second.gi_id]


def test_the_applier_and_the_start_up_sweep_read_the_gpus_without_nvlink_peers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which GPUs reach each other over NVLink describes the published devices only: the applier's index lookups
    before each change and the bare-instance sweep at start leave those 56 NVML calls (an 8-GPU node) out."""
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    pairs = p2p_queries(fake, monkeypatch)
    assert apply(applier(backend, tmp_path), desired({0: {"3g.40gb": 2}})).state == "success"
    assert MigInstances(backend).destroy_bare() == 0
    assert pairs == []
    assert backend.read_inventory().gpus[0].nvlink_peers and pairs  # the slices' reading asks

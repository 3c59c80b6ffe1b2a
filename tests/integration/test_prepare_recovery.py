"""Crash at every step of prepare / unprepare, restart, and check what the node finds; corrupt and future
checkpoints; a reboot that wiped the CDI directory."""

from __future__ import annotations

import asyncio
import errno
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _prepare_kit import NODE, Crash, Node, crash_and_restart, gpu_config

import gpudra.agent.cdi as cdi_module
import gpudra.agent.checkpoint as checkpoint_module
from gpudra.agent.atomic_files import write_atomically
from gpudra.agent.claimpreparer import no_hook
from gpudra.agent.recovery import recover
from gpudra.agent.startreading import StartReading
from gpudra.errors import HardwareError
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.simulated import nvml_types as t
from gpudra.kube.resources import EVENTS
from gpudra.testing import HeldCall


@pytest.fixture
def node(idle_prepare_node: Node) -> Node:
    return idle_prepare_node


MPS = [gpu_config({"strategy": "MPS"})]


@pytest.mark.parametrize(
    ("operation", "step", "prepared_after_restart"),
    [
        ("prepare", "prepare_started", False),
        ("prepare", "cdi_written", False),
        ("prepare", "before_prepare_completed", False),
        ("prepare", "prepare_completed", True),
        ("unprepare", "unprepare_started", False),
        ("unprepare", "cdi_deleted", False),
    ],
)
async def test_crash_points(node: Node, operation: str, step: str, prepared_after_restart: bool) -> None:
    ref = await node.claim("crashy", {"gpu": "gpu-1"}, config=MPS)
    gpu = next(g.index for g in node.backend.read_inventory().gpus if g.minor == 1)
    report = await crash_and_restart(node, ref, operation, step)

    entries = node.preparer.store.claims() if node.preparer else {}
    if prepared_after_restart:
        assert entries[ref.uid].state == "PrepareCompleted"
        assert node.spec_of(ref) is not None
        assert node.fake.gpu(gpu).compute_mode == 3
    else:
        assert ref.uid not in entries
        assert node.spec_of(ref) is None
        assert node.fake.gpu(gpu).compute_mode == 0
        assert ref.uid in report.rolled_back + report.finished or step == "prepare_started"
    # whatever the crash left, the kubelet's next call converges
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert node.spec_of(ref) is not None
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.spec_of(ref) is None and node.fake.gpu(gpu).compute_mode == 0


@pytest.mark.parametrize(
    ("operation", "step", "prepared_after_restart"),
    [
        ("prepare", "cdi_written", False),
        ("prepare", "before_prepare_completed", False),
        ("prepare", "prepare_completed", True),
        ("unprepare", "cdi_deleted", True),
    ],
)
async def test_crash_points_of_a_claim_of_a_cdi_spec_only(
    node: Node, operation: str, step: str, prepared_after_restart: bool
) -> None:
    """A whole GPU without a config changes nothing on the node but its CDI spec, and is recorded once, when
    complete: a crash before that leaves only a spec no entry owns, which the restart deletes. Its unprepare
    removes the entry once the spec is gone: a crash before that leaves the claim prepared, its spec rewritten
    by the restart, until the kubelet's unprepare comes again."""
    ref = await node.claim("spec-only", {"gpu": "gpu-1"})
    report = await crash_and_restart(node, ref, operation, step)

    entries = node.preparer.store.claims() if node.preparer else {}
    if prepared_after_restart:
        assert entries[ref.uid].state == "PrepareCompleted" and node.spec_of(ref) is not None
        assert report.regenerated == ([ref.uid] if operation == "unprepare" else [])
    else:
        assert ref.uid not in entries and node.spec_of(ref) is None
        assert report.orphans_removed == [ref.uid] and report.rolled_back == []
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.spec_of(ref) is None and node.preparer is not None and node.preparer.store.claims() == {}


async def test_a_claim_of_a_cdi_spec_only_is_written_to_the_checkpoint_once_at_prepare_and_unprepare(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("one-write", {"gpu": "gpu-2"})
    writes: list[str] = []
    write = write_atomically

    def counted(path: Path, data: bytes, **kwargs: Any) -> None:
        writes.append(path.name)
        write(path, data, **kwargs)

    monkeypatch.setattr(checkpoint_module, "write_atomically", counted)
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert len(writes) == 1
    assert node.preparer.store.claims()[ref.uid].state == "PrepareCompleted"
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert len(writes) == 2
    assert node.preparer.store.claims() == {} and node.spec_of(ref) is None


async def test_a_claim_of_a_cdi_spec_only_that_cannot_be_recorded_leaves_no_spec(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec is written, then the disk refuses the checkpoint: the prepare fails with the disk's error and
    its spec goes, so no container can be given a device the checkpoint does not know about; the next prepare
    succeeds."""
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("unrecorded", {"gpu": "gpu-3"})
    write = write_atomically

    def disk_full(path: Path, data: bytes, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "write_atomically", disk_full)
    assert "No space left on device" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert node.spec_of(ref) is None and node.preparer.store.get(ref.uid) is None
    monkeypatch.setattr(checkpoint_module, "write_atomically", write)
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert node.spec_of(ref) is not None


DYNAMIC_DEVICE = "gpu-1-mig-1g10gb-19-3"
MIG_MPS = [gpu_config({"strategy": "MPS"}, kind="MigDeviceConfig")]


@pytest.mark.parametrize(
    ("operation", "step", "prepared_after_restart"),
    [
        ("prepare", "instances_planned", False),
        ("prepare", "instances_created", False),
        ("prepare", "instances_recorded", False),
        ("prepare", "prepare_started", False),
        ("prepare", "cdi_written", False),
        ("prepare", "prepare_completed", True),
        ("unprepare", "unprepare_started", False),
        ("unprepare", "cdi_deleted", False),
        ("unprepare", "instances_destroyed", False),
    ],
)
async def test_dynamic_mig_crash_points(
    node: Node, operation: str, step: str, prepared_after_restart: bool
) -> None:
    """A dynamic MIG claim (with MPS through a MigDeviceConfig): whatever step the process dies at, the
    restart leaves either the completed claim with its instance or no claim and no instance."""
    gpu = node.make_dynamic(1)
    ref = await node.claim("dyn", {"mig": DYNAMIC_DEVICE}, config=MIG_MPS)
    report = await crash_and_restart(node, ref, operation, step)

    entries = node.preparer.store.claims() if node.preparer else {}
    if prepared_after_restart:
        assert entries[ref.uid].state == "PrepareCompleted"
        assert node.instances(gpu) == [("1g.10gb", 3)]
    else:
        assert ref.uid not in entries and node.spec_of(ref) is None
        assert node.instances(gpu) == []
        assert ref.uid in report.rolled_back + report.finished
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    (instance,) = node.backend.read_inventory().gpus[gpu].mig_devices
    spec = node.spec_of(ref)
    assert spec is not None
    env = [
        e
        for edits in (spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"]))
        for e in edits.get("env", [])
    ]
    assert f"NVIDIA_VISIBLE_DEVICES={instance.uuid}" in env and any(
        e.startswith("CUDA_MPS_PIPE") for e in env
    )
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [] and node.spec_of(ref) is None


async def test_reboot_regenerates_cdi_specs_before_registration(node: Node) -> None:
    await node.start()
    ref = await node.claim("survivor", {"gpu": "gpu-6"})
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    written = node.spec_of(ref)
    await node.stop()
    shutil.rmtree(node.cdi_dir)  # /var/run/cdi is a tmpfs: a reboot empties it
    report = await node.start()
    assert report.regenerated == [ref.uid]
    assert node.spec_of(ref) == written


@pytest.mark.parametrize("left", [b"", b'{"cdiVersion": "0.6.0", "kind": "nvidia.com/cla', b"[]"])
async def test_a_power_cut_that_left_a_spec_empty_or_cut_short_has_it_rewritten_at_start(
    node: Node, left: bytes
) -> None:
    # specs are replaced atomically but not synced: after a power cut the file may hold nothing or a part
    await node.start()
    ref = await node.claim("cut-short", {"gpu": "gpu-5"})
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    written = node.spec_of(ref)
    await node.stop()
    path = next(node.cdi_dir.glob(f"*{ref.uid}.json"))
    path.write_bytes(left)
    report = await node.start()
    assert report.regenerated == [ref.uid]
    assert node.spec_of(ref) == written


async def test_reboot_that_took_a_dynamic_instance_forgets_the_claim_so_prepare_creates_it_again(
    node: Node,
) -> None:
    gpu = node.make_dynamic(1)
    await node.start()
    ref = await node.claim("after-reboot", {"mig": DYNAMIC_DEVICE})
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    (before,) = node.backend.read_inventory().gpus[gpu].mig_devices
    await node.stop()
    node.backend.destroy_mig_device(gpu, before.gi_id)  # MIG instances do not survive a reboot,
    shutil.rmtree(node.cdi_dir)  # and neither does /var/run/cdi

    report = await node.start()

    assert report.instances_lost == [ref.uid] and node.preparer is not None
    assert ref.uid not in node.preparer.store.claims() and node.spec_of(ref) is None
    assert (await node.kubelet.prepare([ref]))[
        ref.uid
    ].error == ""  # the kubelet prepares before restarting the pod
    (after,) = node.backend.read_inventory().gpus[gpu].mig_devices
    assert (after.profile, after.placement_start) == ("1g.10gb", 3)  # created again
    spec = node.spec_of(ref)
    assert spec is not None and f"NVIDIA_VISIBLE_DEVICES={after.uuid}" in spec["containerEdits"]["env"]


async def test_orphan_specs_and_temp_files_are_removed(node: Node) -> None:
    node.cdi_dir.mkdir(parents=True)
    orphan = node.cdi_dir / "k8s.gpu.nvidia.com-claim_orphan-uid.json"
    orphan.write_text("{}")
    temp = node.cdi_dir / ".k8s.gpu.nvidia.com-claim_x.json.123.tmp"
    temp.write_text("partial")
    unrelated = node.cdi_dir / "other-vendor.json"
    unrelated.write_text("{}")
    report = await node.start()
    assert report.orphans_removed == ["orphan-uid"]
    assert not orphan.exists() and unrelated.exists()
    assert report.temp_files_removed == 1 and not temp.exists()


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        json.dumps(
            {"kind": "gpudra.dev/checkpoint", "version": 99, "node": NODE, "driver": "gpu.nvidia.com"}
        ).encode(),
    ],
    ids=["corrupt", "too-new"],
)
async def test_untrusted_checkpoint_is_reported_on_the_node_and_start_is_clean(
    node: Node, content: bytes
) -> None:
    node.checkpoint.parent.mkdir(parents=True)
    node.checkpoint.write_bytes(content)
    spec = node.cdi_dir / "k8s.gpu.nvidia.com-claim_maybe-in-use.json"
    node.cdi_dir.mkdir(parents=True)
    spec.write_text("{}")
    report = await node.start()
    assert report.checkpoint_problem
    assert list(node.checkpoint.parent.glob("checkpoint.json.unreadable-*"))
    assert spec.exists()  # an untrusted checkpoint cannot say which specs are orphans
    items, _ = await node.client.list_raw(EVENTS, "default")
    assert any(e["involvedObject"]["kind"] == "Node" and e["reason"] == "CheckpointUnreadable" for e in items)
    ref = await node.claim("after", {"gpu": "gpu-0"})
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""


async def test_a_rollback_that_failed_is_finished_before_the_next_prepare(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prepare fails after creating its instance, and NVML refuses to destroy it during the rollback: the
    entry stays with the instance recorded. The kubelet's retry finishes that rollback first, so the claim ends
    with one instance, and unprepare leaves none."""
    gpu = node.make_dynamic(1)
    await node.start()
    ref = await node.claim("retried", {"mig": DYNAMIC_DEVICE})
    preparer, kubelet = node.preparer, node.kubelet
    assert preparer is not None and kubelet is not None
    destroy = node.backend.destroy_mig_device

    def busy(gpu_index: int, gi_id: int) -> None:
        raise HardwareError("the GPU is busy", code="NVML_ERROR_IN_USE")

    def refuse_cdi(step: str) -> None:
        if step == "cdi_written":
            raise HardwareError("disk full")

    preparer.hook = refuse_cdi
    monkeypatch.setattr(node.backend, "destroy_mig_device", busy)
    assert "busy" in (await kubelet.prepare([ref]))[ref.uid].error
    assert preparer.store.claims()[ref.uid].state == "PrepareStarted"
    assert node.instances(gpu) == [("1g.10gb", 3)]

    preparer.hook = no_hook
    monkeypatch.setattr(node.backend, "destroy_mig_device", destroy)
    assert (await kubelet.prepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [("1g.10gb", 3)]
    assert preparer.store.claims()[ref.uid].state == "PrepareCompleted"
    assert (await kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [] and not preparer.store.claims()


@pytest.mark.parametrize(
    ("operation", "nvml_call"),
    [("prepare", "nvmlGpuInstanceCreateComputeInstance"), ("unprepare", "nvmlGpuInstanceDestroy")],
)
async def test_a_process_killed_between_the_gpu_instance_and_its_compute_instance_leaves_no_instance(
    node: Node, monkeypatch: pytest.MonkeyPatch, operation: str, nvml_call: str
) -> None:
    """Killed after NVML made the GPU instance but before its compute instance (or after the compute instance
    was destroyed, before the GPU instance): no MIG device shows that GPU instance, yet it holds its memory
    slices, and a claim created at that placement would fail ("memory slices overlap") for good. The restart
    destroys it with the rest of the claim."""
    gpu = node.make_dynamic(1)
    ref = await node.claim("cut", {"mig": DYNAMIC_DEVICE})
    preparer = node.build()
    await preparer.store.load()
    if operation == "unprepare":
        assert (await preparer.prepare([ref]))[ref.uid].error == ""

    def killed(*args: object) -> None:
        raise Crash(nvml_call)

    monkeypatch.setattr(node.fake, nvml_call, killed)
    with pytest.raises(Crash):
        await getattr(preparer, operation)([ref])
    monkeypatch.undo()
    assert node.instances(gpu) == []  # no MIG device, but
    assert [(g.profile, g.compute_instances) for g in node.backend.gpu_instances(gpu)] == [("1g.10gb", 0)]

    report = await node.start()
    assert ref.uid in report.rolled_back + report.finished
    assert node.backend.gpu_instances(gpu) == ()
    assert node.kubelet is not None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [("1g.10gb", 3)]


async def test_start_up_recovery_destroys_gpu_instances_without_a_compute_instance(node: Node) -> None:
    """Whoever left it (a MigLayout step cut short, or a claim's record the checkpoint lost with an unreadable
    file), a GPU instance without a compute instance is garbage at start-up: the GPU driver's recovery destroys
    it and counts it; a complete MIG device beside it stays."""
    gpu = node.make_dynamic(1)
    node.backend.create_mig_device(gpu, "1g.10gb", 0)
    handle = node.fake.nvmlDeviceGetHandleByIndex(gpu)
    profile = node.fake.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, node.fake.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    )
    placement = node.fake.c_nvmlGpuInstancePlacement_t(4, 1)
    node.fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile.id, placement)
    assert [g.compute_instances for g in node.backend.gpu_instances(gpu)] == [1, 0]

    report = await recover(node.build(), bare_instances=True)
    assert report.bare_instances_destroyed == 1
    assert node.instances(gpu) == [("1g.10gb", 0)]
    assert [g.compute_instances for g in node.backend.gpu_instances(gpu)] == [1]


async def test_the_start_reading_finds_the_bare_instances_and_is_not_used_after_one_is_destroyed(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's start reading serves the look for bare GPU instances; destroying one changes the GPU, so the
    MIG report and the first publish that follow read it afresh."""
    gpu = node.make_dynamic(1)
    handle = node.fake.nvmlDeviceGetHandleByIndex(gpu)
    profile = node.fake.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, node.fake.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    )
    placement = node.fake.c_nvmlGpuInstancePlacement_t(4, 1)
    node.fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile.id, placement)
    start = StartReading(node.backend, max_age_seconds=60)
    await start.take()
    assert start.current() is not None
    readings: list[bool] = []
    read = node.backend.read_inventory

    def counted(*, nvlink_peers: bool = True) -> NodeInventory:
        readings.append(nvlink_peers)
        return read(nvlink_peers=nvlink_peers)

    monkeypatch.setattr(node.backend, "read_inventory", counted)
    report = await recover(node.build(), bare_instances=True, start=start)
    assert report.bare_instances_destroyed == 1
    assert node.backend.gpu_instances(gpu) == ()
    assert readings == []  # the start reading told which GPUs have MIG on
    assert start.current() is None


async def test_a_prepare_cancelled_while_nvml_creates_its_instance_rolls_back_after_the_create(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet gives up on the call (gRPC cancels the handler) while NVML is creating the claim's instance in a
    worker thread. The create ends first, then the rollback destroys it: nothing is left for the kubelet's
    unprepare to miss, and the claim's lock is released only then."""
    gpu = node.make_dynamic(1)
    ref = await node.claim("abandoned", {"mig": DYNAMIC_DEVICE})
    preparer = node.build()
    await preparer.store.load()
    create = HeldCall(node.fake.nvmlDeviceCreateGpuInstanceWithPlacement, hold=30)
    monkeypatch.setattr(node.fake, "nvmlDeviceCreateGpuInstanceWithPlacement", create)
    call = asyncio.create_task(preparer.prepare([ref]))
    await asyncio.to_thread(create.entered.wait, 30)
    call.cancel()
    # nothing may end the call while NVML still creates (a bound on a non-event: it cannot fail spuriously)
    finished, _ = await asyncio.wait([call], timeout=1.0)
    assert not finished, "the prepare ended (and rolled back) before NVML had created its instance"
    create.release.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.to_thread(create.returned.wait, 30)
    assert node.backend.gpu_instances(gpu) == ()
    assert ref.uid not in preparer.store.claims() and node.spec_of(ref) is None
    monkeypatch.undo()
    assert (await preparer.prepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [("1g.10gb", 3)]


# -- failures NVML (or the disk) answers, injected in the simulated NVML: each prepare or unprepare that fails leaves
# the GPU as it was before the claim, or records what is left so that the next call or a restart finishes it.


async def test_a_compute_instance_that_fails_leaves_no_gpu_instance(node: Node) -> None:
    gpu = node.make_dynamic(1)
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("ci-fails", {"mig": DYNAMIC_DEVICE})
    node.fake.inject_call(
        "nvmlGpuInstanceCreateComputeInstance", error=t.NVMLError_InsufficientResources, times=1
    )
    assert "compute instance" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert node.backend.gpu_instances(gpu) == ()
    assert node.preparer.store.get(ref.uid) is None and node.spec_of(ref) is None
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [("1g.10gb", 3)]


@pytest.mark.parametrize("finished_by", ["next prepare", "restart"])
async def test_a_gpu_instance_that_cannot_be_destroyed_after_its_compute_instance_failed_is_destroyed_later(
    node: Node, finished_by: str
) -> None:
    """The compute instance fails and the GPU instance, busy, cannot be destroyed (by the create's own cleanup,
    nor by the claim's rollback): the claim stays recorded with it, the GPU holds a GPU instance no MIG device
    shows; the kubelet's next prepare, or a restart, destroys it first."""
    gpu = node.make_dynamic(1)
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("gi-stuck", {"mig": DYNAMIC_DEVICE})
    node.fake.inject_call("nvmlGpuInstanceCreateComputeInstance", error=t.NVMLError_Unknown, times=1)
    node.fake.inject_call("nvmlGpuInstanceDestroy", error=t.NVMLError_InUse, times=2)
    assert "In use" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert [(g.profile, g.compute_instances) for g in node.backend.gpu_instances(gpu)] == [("1g.10gb", 0)]
    assert node.preparer.store.claims()[ref.uid].state == "PrepareStarted"

    if finished_by == "restart":
        report = await node.restart()
        assert ref.uid in report.rolled_back
        assert node.backend.gpu_instances(gpu) == ()
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert [(g.profile, g.compute_instances) for g in node.backend.gpu_instances(gpu)] == [("1g.10gb", 1)]


async def test_a_cdi_spec_that_cannot_be_written_rolls_the_instance_back(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instance is created, then the disk refuses the CDI spec: the prepare fails with the disk's error, the
    instance is destroyed and nothing is recorded."""
    gpu = node.make_dynamic(1)
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("disk-full", {"mig": DYNAMIC_DEVICE})

    def disk_full(path: object, data: bytes, **_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cdi_module, "write_atomically", disk_full)
    assert "No space left on device" in (await node.kubelet.prepare([ref]))[ref.uid].error
    assert node.backend.gpu_instances(gpu) == ()
    assert node.preparer.store.get(ref.uid) is None
    monkeypatch.undo()
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    assert node.instances(gpu) == [("1g.10gb", 3)]


async def test_an_unprepare_whose_gpu_instance_is_in_use_is_finished_by_the_next_one(node: Node) -> None:
    gpu = node.make_dynamic(1)
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("busy-at-unprepare", {"mig": DYNAMIC_DEVICE})
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    node.fake.inject_call("nvmlGpuInstanceDestroy", error=t.NVMLError_InUse, times=1)
    assert "In use" in (await node.kubelet.unprepare([ref]))[ref.uid].error
    assert node.preparer.store.claims()[ref.uid].state == "UnprepareStarted"
    assert node.spec_of(ref) is None  # the containers can no longer get it
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.backend.gpu_instances(gpu) == () and node.preparer.store.get(ref.uid) is None


async def test_an_unprepare_while_nvml_cannot_read_the_gpu_keeps_the_claim_until_it_can(node: Node) -> None:
    """A GPU NVML cannot read is left out of the inventory, but it is not gone: its claim's instance is not
    forgotten (it would hold its memory slices for good); the next unprepare destroys it."""
    gpu = node.make_dynamic(1)
    await node.start()
    assert node.kubelet is not None and node.preparer is not None
    ref = await node.claim("unreadable", {"mig": DYNAMIC_DEVICE})
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
    node.fake.inject_call("nvmlDeviceGetUUID", gpu=gpu, error=t.NVMLError_Unknown)
    assert "NVML cannot read a GPU" in (await node.kubelet.unprepare([ref]))[ref.uid].error
    assert ref.uid in node.preparer.store.claims()
    node.fake.clear_injections()
    assert [(g.profile, g.compute_instances) for g in node.backend.gpu_instances(gpu)] == [("1g.10gb", 1)]
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.backend.gpu_instances(gpu) == () and node.preparer.store.get(ref.uid) is None

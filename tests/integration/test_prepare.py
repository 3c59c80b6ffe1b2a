"""Prepare / unprepare through the real gRPC sockets, against the embedded API server and simulated GPUs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _prepare_kit import DRIVER, NODE, HeldClaimReads, HeldStatusWrites, Node, gpu_config
from prometheus_client.metrics import MetricWrapperBase

from gpudra.agent.checkpoint import CheckpointStore, DeviceRecord
from gpudra.agent.claimpreparer import ClaimPreparer
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.agent.reservations import DeviceReservations
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import RESOURCE_CLAIMS
from nvmlkit import p2p_queries


@pytest.fixture
def node(prepare_node: Node) -> Node:
    return prepare_node


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    """The environment of a container given every device of the claim (spec-wide edits, then each device's)."""
    edits = [
        spec.get("containerEdits") or {},
        *((d.get("containerEdits") or {}) for d in spec.get("devices") or []),
    ]
    return dict(e.split("=", 1) for edit in edits for e in edit.get("env") or [])


def ready_of(claim: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (d["driver"], d["pool"], d["device"]): next(c for c in d["conditions"] if c["type"] == "Ready")
        for d in (claim.get("status") or {}).get("devices") or []
    }


async def prepare(node: Node, ref: ClaimRef) -> Any:
    assert node.kubelet is not None
    return (await node.kubelet.prepare([ref]))[ref.uid]


async def test_prepare_writes_cdi_spec_and_claim_status(node: Node) -> None:
    ref = await node.claim("train", {"gpu": "gpu-3"})
    result = await prepare(node, ref)
    assert result.error == ""
    (device,) = result.devices
    assert (device.pool_name, device.device_name, list(device.request_names)) == (NODE, "gpu-3", ["gpu"])
    assert list(device.cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={ref.uid}-gpu-3"]
    spec = node.spec_of(ref)
    assert spec is not None and spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert env_of(spec)["NVIDIA_VISIBLE_DEVICES"] == node.uuid(3)
    (cdi_device,) = spec["devices"]
    assert cdi_device["name"] == f"{ref.uid}-gpu-3"
    minor = node.backend.read_inventory().gpus[3].minor
    assert {"path": f"/dev/nvidia{minor}"} in cdi_device["containerEdits"]["deviceNodes"]
    claim = await node.get_claim(ref)
    ready = ready_of(claim)[(DRIVER, NODE, "gpu-3")]
    assert (ready["status"], ready["reason"]) == ("True", "Prepared")
    (status_entry,) = claim["status"]["devices"]
    assert status_entry["data"]["uuid"] == node.uuid(3)


async def test_repeated_prepare_answers_the_same_without_rewriting(node: Node) -> None:
    ref = await node.claim("again")
    first = await prepare(node, ref)
    path = node.specs().path_for(ref.uid)
    before = path.stat().st_mtime_ns, path.stat().st_ino
    second = await prepare(node, ref)
    assert second == first
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before


async def test_unprepare_removes_spec_and_status_and_is_idempotent(node: Node) -> None:
    ref = await node.claim("done")
    await prepare(node, ref)
    assert node.kubelet is not None
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert node.spec_of(ref) is None
    assert not (await node.get_claim(ref))["status"].get("devices")
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    unknown = ClaimRef(namespace="team-a", uid="never-prepared", name="ghost")
    assert (await node.kubelet.unprepare([unknown]))[unknown.uid].error == ""


async def test_status_entries_of_other_drivers_are_kept(node: Node) -> None:
    ref = await node.claim("mixed")
    claim = await node.get_claim(ref)
    other = {"driver": "net.example.com", "pool": NODE, "device": "nic-0", "conditions": []}
    claim["status"]["devices"] = [other]
    await node.client.replace(RESOURCE_CLAIMS, claim, subresource="status")
    await prepare(node, ref)
    devices = (await node.get_claim(ref))["status"]["devices"]
    assert devices[0] == other and len(devices) == 2
    assert node.kubelet is not None
    await node.kubelet.unprepare([ref])
    assert (await node.get_claim(ref))["status"]["devices"] == [other]


async def test_unprepare_of_a_claim_unchanged_since_its_prepare_does_not_read_it_again(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = await node.claim("untouched")
    await prepare(node, ref)
    reads: list[str] = []
    get_raw = node.client.get_raw

    async def counted(res: Any, name: str, namespace: str | None = None) -> Any:
        reads.append(name)
        return await get_raw(res, name, namespace)

    monkeypatch.setattr(node.client, "get_raw", counted)
    assert node.kubelet is not None
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    await node.written()  # the status write follows the answer
    assert reads == []
    assert not (await node.get_claim(ref))["status"].get("devices")


async def test_unprepare_of_a_claim_changed_since_its_prepare_removes_only_this_nodes_entries(
    node: Node,
) -> None:
    ref = await node.claim("touched")
    await prepare(node, ref)
    claim = await node.get_claim(ref)
    other = {"driver": "net.example.com", "pool": NODE, "device": "nic-0", "conditions": []}
    claim["status"]["devices"].append(other)
    # another writer: the status the agent's write answered is out of date
    await node.client.replace(RESOURCE_CLAIMS, claim, subresource="status")
    assert node.kubelet is not None
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert (await node.get_claim(ref))["status"]["devices"] == [other]


async def test_the_kubelets_answer_does_not_wait_for_the_claim_status_write(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's start waits for NodePrepareResources; the status entry only informs, so it is written after the
    answer (an API server slow to take it no longer holds the pod back)."""
    ref = await node.claim("quick")
    writes = HeldStatusWrites(node.client, monkeypatch)
    result = await asyncio.wait_for(prepare(node, ref), timeout=30)  # the write is held until after this
    assert result.error == "" and node.spec_of(ref) is not None
    await asyncio.wait_for(writes.waiting.wait(), timeout=30)
    unwritten = await node.client.get_raw(RESOURCE_CLAIMS, ref.name, ref.namespace)
    assert not (unwritten.get("status") or {}).get("devices")
    writes.release.set()
    ready = ready_of(await node.get_claim(ref))[(DRIVER, NODE, "gpu-0")]
    assert (ready["status"], ready["reason"]) == ("True", "Prepared")


async def test_a_claims_status_writes_land_in_the_order_of_its_calls(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prepare's Ready entry, still being written when the unprepare is answered, does not outlive the
    unprepare: the claim ends with no entry of this node."""
    ref = await node.claim("brief")
    writes = HeldStatusWrites(node.client, monkeypatch)
    assert (await asyncio.wait_for(prepare(node, ref), timeout=30)).error == ""
    assert node.kubelet is not None
    await asyncio.wait_for(writes.waiting.wait(), timeout=30)
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    writes.release.set()
    assert not (await node.get_claim(ref))["status"].get("devices")


async def held_prepare_beside(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> tuple[ClaimRef, ClaimRef, HeldClaimReads, asyncio.Task[Any], HeldStatusWrites]:
    """Claim "slow" (gpu-2) in a prepare held in flight, claim "quick" (gpu-1) prepared beside it; and the status
    writes, seen (``waiting``) but not held."""
    quick = await node.claim("quick", {"gpu": "gpu-1"})
    slow = await node.claim("slow", {"gpu": "gpu-2"})
    reads = HeldClaimReads(node.client, monkeypatch, "slow")
    writes = HeldStatusWrites(node.client, monkeypatch)
    writes.release.set()
    slow_call = asyncio.create_task(prepare(node, slow))
    await asyncio.wait_for(reads.waiting.wait(), timeout=30)
    assert (await asyncio.wait_for(prepare(node, quick), timeout=30)).error == ""
    return quick, slow, reads, slow_call, writes


async def test_a_claims_status_is_written_once_the_node_answers_no_call(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of prepares (a Job's pods landing on the node at once) is answered before its status writes take
    the agent's CPU and the API server's: the Ready entry waits until no other call is in flight."""
    node.defer_seconds = 60.0
    await node.restart()
    quick, slow, reads, slow_call, writes = await held_prepare_beside(node, monkeypatch)
    written = asyncio.create_task(writes.waiting.wait())
    done, _ = await asyncio.wait({written}, timeout=1.0)  # must not come while "slow" is in flight
    assert not done
    reads.release.set()
    assert (await asyncio.wait_for(slow_call, timeout=30)).error == ""
    await asyncio.wait_for(written, timeout=30)
    for ref, gpu in ((quick, "gpu-1"), (slow, "gpu-2")):
        assert ready_of(await node.get_claim(ref))[(DRIVER, NODE, gpu)]["status"] == "True"


async def test_a_claims_writes_held_back_together_land_in_the_order_of_its_calls(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim prepared and unprepared while another call stays in flight: both writes wait, then the removal
    lands after the Ready entry, not before it."""
    node.defer_seconds = 60.0
    await node.restart()
    quick, slow, reads, slow_call, _ = await held_prepare_beside(node, monkeypatch)
    assert node.kubelet is not None
    assert (await node.kubelet.unprepare([quick]))[quick.uid].error == ""
    reads.release.set()
    assert (await asyncio.wait_for(slow_call, timeout=30)).error == ""
    assert not (await node.get_claim(quick))["status"].get("devices")
    assert ready_of(await node.get_claim(slow))[(DRIVER, NODE, "gpu-2")]["status"] == "True"


async def test_a_claims_status_is_written_while_calls_go_on_after_the_longest_wait(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that never stops answering calls still gets its claims' status, after ``defer_seconds``."""
    node.defer_seconds = 0.2
    await node.restart()
    quick, _, reads, slow_call, writes = await held_prepare_beside(node, monkeypatch)
    await asyncio.wait_for(writes.waiting.wait(), timeout=30)
    assert not slow_call.done()
    assert ready_of(await node.get_claim(quick))[(DRIVER, NODE, "gpu-1")]["status"] == "True"
    reads.release.set()
    assert (await asyncio.wait_for(slow_call, timeout=30)).error == ""


async def test_a_prepare_reads_the_gpus_without_asking_for_nvlink_peers(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prepare reads the node's GPUs afresh; which GPUs reach each other over NVLink only describes the devices
    (56 NVML calls on an 8-GPU node), and no plan uses it."""
    pairs = p2p_queries(node.fake, monkeypatch)
    assert node.backend.read_inventory().gpus[0].nvlink_peers and pairs  # the slices' reading asks
    pairs.clear()
    ref = await node.claim("peerless", {"gpu": "gpu-2"})
    assert (await prepare(node, ref)).error == ""
    assert node.kubelet is not None
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert pairs == []


async def test_different_claims_prepare_concurrently(node: Node) -> None:
    refs = [await node.claim(f"c{i}", {"gpu": f"gpu-{i}"}) for i in range(6)]
    assert node.kubelet is not None
    results = await asyncio.gather(*(node.kubelet.prepare([r]) for r in refs))
    assert all(r[ref.uid].error == "" for r, ref in zip(results, refs, strict=True))
    assert sorted(node.specs().claim_uids()) == sorted(r.uid for r in refs)


async def test_a_device_prepared_for_another_claim_is_refused(node: Node) -> None:
    first = await node.claim("first", {"gpu": "gpu-1"})
    second = await node.claim("second", {"gpu": "gpu-1"})
    assert (await prepare(node, first)).error == ""
    result = await prepare(node, second)
    assert "gpu-1 is already prepared for claim" in result.error and first.uid in result.error
    assert node.spec_of(second) is None
    ready = ready_of(await node.get_claim(second))[(DRIVER, NODE, "gpu-1")]
    assert (ready["status"], ready["reason"]) == ("False", "DeviceInUse")


async def test_concurrent_prepares_of_one_device_give_it_to_one_claim(node: Node) -> None:
    refs = [await node.claim(f"race{i}", {"gpu": "gpu-5"}) for i in range(4)]
    assert node.kubelet is not None
    results = await asyncio.gather(*(node.kubelet.prepare([r]) for r in refs))
    errors = [res[ref.uid].error for res, ref in zip(results, refs, strict=True)]
    assert sum(1 for e in errors if e == "") == 1
    assert len(node.specs().claim_uids()) == 1


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong-node", "not on this node node-1"),
        ("unallocated", "is not allocated"),
        ("replaced", "claim got replaced"),
        ("missing", "not found"),
        ("unknown-device", "device gpu-42 of request 'gpu' is not on this node"),
    ],
)
async def test_claims_that_cannot_be_prepared_fail_clearly(node: Node, case: str, expected: str) -> None:
    if case == "wrong-node":
        ref = await node.claim(case, pool="node-2")
    elif case == "unallocated":
        ref = await node.claim(case, allocate=False)
    elif case == "replaced":
        ref = await node.claim(case)
        ref = ClaimRef(namespace=ref.namespace, uid="0ld-uid", name=ref.name)
    elif case == "missing":
        ref = ClaimRef(namespace="team-a", uid="u-missing", name="missing")
    else:
        ref = await node.claim(case, {"gpu": "gpu-42"})
    result = await prepare(node, ref)
    assert expected in result.error
    assert result.devices == ()
    assert node.specs().claim_uids() == []


async def test_opaque_config_error_names_the_field_and_is_reported(node: Node) -> None:
    config = gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentag": 50}})
    ref = await node.claim("typo", config=[config])
    result = await prepare(node, ref)
    assert "defaultActiveThreadPercentag: unknown field" in result.error
    ready = ready_of(await node.get_claim(ref))[(DRIVER, NODE, "gpu-0")]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidConfig")
    assert "defaultActiveThreadPercentag" in ready["message"]
    events = [e for e in await node.events() if e["involvedObject"]["uid"] == ref.uid]
    assert events and events[0]["type"] == "Warning" and "InvalidConfig" in events[0]["message"]


async def test_mps_sets_exclusive_process_and_mps_environment(node: Node) -> None:
    config = gpu_config(
        {
            "strategy": "MPS",
            "mpsConfig": {"defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "2Gi"},
        }
    )
    ref = await node.claim("mps", {"gpu": "gpu-2"}, config=[config])
    assert (await prepare(node, ref)).error == ""
    index = next(g.index for g in node.backend.read_inventory().gpus if g.minor == 2)
    assert node.fake.gpu(index).compute_mode == 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    spec = node.spec_of(ref)
    assert spec is not None
    env = env_of(spec)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert "CUDA_MPS_LOG_DIRECTORY" in env
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{node.uuid(index)}=2048M"
    # the directories the spec mounts exist before a runtime reads it (runc refuses a missing mount source),
    # shared by the claim's containers whatever user each runs as, and go with the claim
    mounted = [Path(m["hostPath"]) for d in spec["devices"] for m in d["containerEdits"].get("mounts", [])]
    assert {p.name for p in mounted} == {"pipe", "log"}
    assert all(p.is_dir() and p.stat().st_mode & 0o7777 == 0o1777 for p in mounted)
    assert node.kubelet is not None
    await node.kubelet.unprepare([ref])
    assert node.fake.gpu(index).compute_mode == 0
    assert not any(p.exists() for p in mounted) and not (node.root / "mps" / ref.uid).exists()


async def test_time_slicing_interval_is_applied_and_undone(node: Node) -> None:
    config = gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    ref = await node.claim("ts", {"gpu": "gpu-4"}, config=[config])
    assert (await prepare(node, ref)).error == ""
    index = next(g.index for g in node.backend.read_inventory().gpus if g.minor == 4)
    assert node.fake.gpu(index).time_slice == 3
    assert node.kubelet is not None
    await node.kubelet.unprepare([ref])
    assert node.fake.gpu(index).time_slice == 0


async def test_a_shared_gpu_keeps_its_time_slice_while_another_claim_holds_it(node: Node) -> None:
    node.shareable = ("gpu-4",)
    config = gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    first = await node.claim("ts-a", {"gpu": "gpu-4"}, config=[config])
    second = await node.claim("ts-b", {"gpu": "gpu-4"}, config=[config])
    assert (await prepare(node, first)).error == ""
    assert (await prepare(node, second)).error == ""
    index = next(g.index for g in node.backend.read_inventory().gpus if g.minor == 4)
    assert node.kubelet is not None
    await node.kubelet.unprepare([first])
    assert node.fake.gpu(index).time_slice == 3  # the other tenant still runs with it
    await node.kubelet.unprepare([second])
    assert node.fake.gpu(index).time_slice == 0


async def test_metrics_count_prepares(node: Node) -> None:
    ok = await node.claim("m-ok")
    bad = await node.claim("m-bad", pool="elsewhere")
    await prepare(node, ok)
    await prepare(node, bad)
    sample = node.metrics.registry.get_sample_value
    assert sample("gpudra_prepare_requests_total", {"node": NODE, "result": "ok"}) == 1
    assert (
        sample("gpudra_prepare_errors_total", {"node": NODE, "operation": "prepare", "reason": "WrongNode"})
        == 1
    )
    assert sample("gpudra_prepared_devices", {"node": NODE}) == 1


async def test_prepares_and_unprepares_look_up_no_metric_series(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The series a call counts in are bound when the preparer is built: a labelled metric's ``labels()`` locks
    and builds a key each time (three times a call before), and the prepared devices are counted when scraped."""
    refs = [await node.claim(f"series-{i}", {"gpu": f"gpu-{i}"}) for i in range(3)]
    lookups: list[tuple[str, ...]] = []
    labels = MetricWrapperBase.labels

    def counted(self: MetricWrapperBase, *values: str, **named: str) -> Any:
        lookups.append(values)
        return labels(self, *values, **named)

    monkeypatch.setattr(MetricWrapperBase, "labels", counted)
    assert node.kubelet is not None
    answers = await asyncio.gather(*(node.kubelet.prepare([r]) for r in refs))
    assert all(a[r.uid].error == "" for a, r in zip(answers, refs, strict=True))
    sample = node.metrics.registry.get_sample_value
    assert sample("gpudra_prepared_devices", {"node": NODE}) == 3
    assert (await node.kubelet.unprepare([refs[0]]))[refs[0].uid].error == ""
    assert lookups == []
    assert sample("gpudra_prepare_requests_total", {"node": NODE, "result": "ok"}) == 3
    assert sample("gpudra_unprepare_requests_total", {"node": NODE, "result": "ok"}) == 1
    assert sample("gpudra_prepare_seconds_count", {"node": NODE}) == 3
    assert sample("gpudra_prepared_devices", {"node": NODE}) == 2


async def test_the_prepared_devices_gauge_counts_every_driver_of_the_node(node: Node, tmp_path: Path) -> None:
    """The GPU driver and the compute-domain driver prepare on one node with one registry: the gauge is what
    both hold, not what the last one to answer a call holds; a preparer built again replaces its own count."""
    other = CheckpointStore(
        tmp_path / "other" / "checkpoint.json", node=NODE, driver="compute-domain.nvidia.com"
    )
    await other.load()
    await other.transition(
        "cd-claim", "PrepareCompleted", namespace="team-a", name="channel",
        devices=[DeviceRecord(pool_name=NODE, device_name="channel-0")],
    )  # fmt: skip
    assert node.preparer is not None
    ClaimPreparer(
        client=node.client, backend=node.backend, store=other,
        status=ClaimStatus(node.client, EventRecorder(node.client, "t"), driver=other.driver, node=NODE),
        reservations=DeviceReservations(other), effects=node.preparer.effects, metrics=node.metrics,
    )  # fmt: skip
    ref = await node.claim("gpu-claim", {"gpu": "gpu-5"})
    assert (await prepare(node, ref)).error == ""
    sample = node.metrics.registry.get_sample_value
    assert sample("gpudra_prepared_devices", {"node": NODE}) == 2
    await node.restart()
    assert sample("gpudra_prepared_devices", {"node": NODE}) == 2


async def test_checkpoint_records_prepared_claim(node: Node) -> None:
    ref = await node.claim("ckpt")
    await prepare(node, ref)
    document = json.loads(node.checkpoint.read_text())
    assert document["payload"]["claims"][ref.uid]["state"] == "PrepareCompleted"


async def test_a_whole_gpu_hands_the_worker_threads_only_the_reading_and_the_checkpoint(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hand-off to a worker thread costs the agent's event loop about 0.06 ms of CPU, more than writing a CDI
    spec without a sync: a whole GPU's prepare hands the worker threads two jobs (the reading of the GPUs, the
    checkpoint's durable write), its unprepare one (the checkpoint); the spec is written and removed all the
    same."""
    ref = await node.claim("handoffs", {"gpu": "gpu-2"})
    jobs: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        jobs.append(getattr(fn, "__qualname__", repr(fn)))
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    assert (await prepare(node, ref)).error == ""
    assert len(jobs) == 2, jobs
    assert node.spec_of(ref) is not None
    jobs.clear()
    assert node.kubelet is not None
    assert (await node.kubelet.unprepare([ref]))[ref.uid].error == ""
    assert len(jobs) == 1, jobs
    assert node.spec_of(ref) is None
    assert ref.uid not in json.loads(node.checkpoint.read_text())["payload"]["claims"]

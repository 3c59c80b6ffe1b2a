"""The prepared-claims checkpoint: round trips, untrusted files, migration, atomicity, concurrency."""

# ruff: noqa: ASYNC240 - tests read and write small files in tmp_path directly; blocking is harmless here

from __future__ import annotations

import asyncio
import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpudra.agent import checkpoint as checkpoint_module
from gpudra.agent import keyedlocks
from gpudra.agent.checkpoint import (
    BASE_VERSION,
    CURRENT_VERSION,
    KIND,
    CheckpointStore,
    ClaimState,
    DeviceRecord,
    MigInstanceRecord,
    VfioBindingRecord,
    checksum,
)
from gpudra.errors import (
    CheckpointChecksumMismatch,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointForeign,
    CheckpointTooNew,
)

NODE = "node-1"
DRIVER = "gpu.nvidia.com"
NOW = 1_760_000_000.0


def store(path: Path, *, node: str = NODE) -> CheckpointStore:
    return CheckpointStore(path, node=node, driver=DRIVER, clock=lambda: NOW)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint.json"


DEVICE = DeviceRecord(
    pool_name=NODE,
    device_name="gpu-0",
    request_names=["gpu"],
    cdi_device_ids=["k8s.gpu.nvidia.com/claim=uid-1-gpu-0"],
    uuid="GPU-aaaa",
    device_type="gpu",
)
MIG = MigInstanceRecord(
    parent_uuid="GPU-bbbb", profile="1g.12gb", placement_start=0, gpu_instance_id=9, compute_instance_id=0
)


async def prepared(path: Path) -> CheckpointStore:
    checkpoint = store(path)
    await checkpoint.load()
    await checkpoint.transition("uid-1", "PrepareStarted", namespace="team-a", name="claim-1")
    await checkpoint.transition(
        "uid-1",
        "PrepareCompleted",
        devices=[DEVICE],
        cdi_spec="/var/run/cdi/k8s.gpu.nvidia.com-claim_uid-1.json",
        mig_instances_created=[MIG],
        configs={"gpu-0": {"kind": "GpuConfig", "sharing": {"strategy": "MPS"}}},
    )
    return checkpoint


async def test_missing_file_is_an_empty_checkpoint(path: Path) -> None:
    assert await store(path).load() == {}
    assert not path.exists()


async def test_round_trip(path: Path) -> None:
    checkpoint = await prepared(path)
    reloaded = await store(path).load()
    assert reloaded == checkpoint.claims()
    entry = reloaded["uid-1"]
    assert (entry.namespace, entry.name, entry.state) == ("team-a", "claim-1", "PrepareCompleted")
    assert entry.devices == [DEVICE]
    assert entry.mig_instances_created == [MIG]
    assert entry.configs["gpu-0"]["sharing"] == {"strategy": "MPS"}
    document = json.loads(path.read_text())
    assert (document["kind"], document["version"], document["node"], document["driver"]) == (
        KIND,
        BASE_VERSION,
        NODE,
        DRIVER,
    )
    assert document["checksum"] == checksum(document["payload"])
    assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_unprepare_then_remove(path: Path) -> None:
    checkpoint = await prepared(path)
    await checkpoint.transition("uid-1", "UnprepareStarted")
    assert (await store(path).load())["uid-1"].state == "UnprepareStarted"
    assert await checkpoint.remove("uid-1") is True
    assert await checkpoint.remove("uid-1") is False
    assert await store(path).load() == {}


async def test_impossible_transitions_are_refused(path: Path) -> None:
    checkpoint = store(path)
    await checkpoint.load()
    with pytest.raises(CheckpointError, match="cannot go from unknown to UnprepareStarted"):
        await checkpoint.transition("uid-9", "UnprepareStarted")
    states: list[ClaimState] = ["PrepareStarted", "PrepareCompleted"]
    for state in states:
        with pytest.raises(CheckpointError, match="namespace and name"):
            await checkpoint.transition("uid-9", state)


async def test_a_claim_of_a_spec_only_is_recorded_completed_in_one_write(path: Path) -> None:
    checkpoint = store(path)
    await checkpoint.load()
    await checkpoint.transition("uid-1", "PrepareCompleted", namespace="a", name="c", cdi_spec="/cdi/x.json")
    assert (await store(path).load())["uid-1"].state == "PrepareCompleted"


def valid_document() -> dict[str, Any]:
    payload = {"claims": {"uid-1": {"namespace": "a", "name": "c", "state": "PrepareCompleted"}}}
    return {
        "kind": KIND,
        "version": CURRENT_VERSION,
        "node": NODE,
        "driver": DRIVER,
        "checksum": checksum(payload),
        "payload": payload,
    }


def dumped(change: Callable[[dict[str, Any]], None]) -> bytes:
    document = valid_document()
    change(document)
    return json.dumps(document).encode()


def resigned(change: Callable[[dict[str, Any]], None]) -> bytes:
    """A change to the payload with a correct checksum (so only the content is wrong)."""

    def both(document: dict[str, Any]) -> None:
        change(document)
        document["checksum"] = checksum(document["payload"])

    return dumped(both)


def set_key(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda document: document.__setitem__(key, value)


UNTRUSTED = [
    ("empty", b"", CheckpointCorrupt, "is empty"),
    ("truncated", json.dumps(valid_document()).encode()[:120], CheckpointCorrupt, "not valid JSON"),
    ("garbage", b"\x00\xff\x13", CheckpointCorrupt, "not valid JSON"),
    ("a list", b"[]", CheckpointCorrupt, "not a JSON object"),
    (
        "edited payload",
        dumped(lambda d: d["payload"]["claims"]["uid-1"].__setitem__("state", "PrepareStarted")),
        CheckpointChecksumMismatch,
        "fails its checksum",
    ),
    ("no checksum", dumped(lambda d: d.pop("checksum")), CheckpointChecksumMismatch, "fails its checksum"),
    ("other node", dumped(set_key("node", "node-2")), CheckpointForeign, "node 'node-2', not 'node-1'"),
    ("other driver", dumped(set_key("driver", "x.example.com")), CheckpointForeign, "driver 'x.example.com'"),
    (
        "other kind",
        dumped(set_key("kind", "nvidia/checkpoint")),
        CheckpointForeign,
        "kind 'nvidia/checkpoint'",
    ),
    ("newer version", dumped(set_key("version", CURRENT_VERSION + 1)), CheckpointTooNew, "newer gpudra"),
    ("no version", dumped(lambda d: d.pop("version")), CheckpointCorrupt, "no valid version"),
    (
        "bad state",
        resigned(lambda d: d["payload"]["claims"]["uid-1"].__setitem__("state", "Prepared")),
        CheckpointCorrupt,
        "invalid payload",
    ),
    (
        "unknown field",
        resigned(lambda d: d["payload"]["claims"]["uid-1"].__setitem__("colour", "red")),
        CheckpointCorrupt,
        "invalid payload",
    ),
]


@pytest.mark.parametrize(
    ("content", "error", "message"), [u[1:] for u in UNTRUSTED], ids=[u[0] for u in UNTRUSTED]
)
async def test_untrusted_files_are_detected_kept_and_never_overwritten(
    path: Path, content: bytes, error: type[CheckpointError], message: str
) -> None:
    path.write_bytes(content)
    checkpoint = store(path)
    with pytest.raises(error, match=message) as caught:
        await checkpoint.load()
    kept = path.with_name(f"checkpoint.json.unreadable-{int(NOW)}")
    assert str(kept) in str(caught.value)
    assert caught.value.path == str(path)
    assert kept.read_bytes() == content
    with pytest.raises(CheckpointError, match="not loaded"):
        await checkpoint.transition("uid-2", "PrepareStarted", namespace="a", name="b")
    assert path.read_bytes() == content

    await checkpoint.reset()
    await checkpoint.transition("uid-2", "PrepareStarted", namespace="a", name="b")
    assert set(await store(path).load()) == {"uid-2"}
    assert kept.read_bytes() == content


async def test_reset_without_a_failed_load_is_refused(path: Path) -> None:
    await prepared(path)
    with pytest.raises(CheckpointError, match="refusing to reset"):
        await store(path).reset()
    assert "uid-1" in await store(path).load()


async def test_older_version_is_migrated_and_kept(path: Path) -> None:
    payload = {
        "claims": {
            "uid-1": {
                "namespace": "a",
                "name": "c1",
                "prepared": True,
                "pool": NODE,
                "devices": ["gpu-0", "gpu-1"],
            },
            "uid-2": {"namespace": "a", "name": "c2", "prepared": False, "devices": []},
        }
    }
    v1 = {"kind": KIND, "version": 1, "node": NODE, "driver": DRIVER, "checksum": checksum(payload)}
    v1["payload"] = payload
    path.write_text(json.dumps(v1))
    claims = await store(path).load()
    assert claims["uid-1"].state == "PrepareCompleted"
    assert [d.device_name for d in claims["uid-1"].devices] == ["gpu-0", "gpu-1"]
    assert claims["uid-1"].devices[0].pool_name == NODE
    assert claims["uid-2"].state == "PrepareStarted"
    assert json.loads(path.read_text())["version"] == BASE_VERSION
    assert json.loads(path.with_name("checkpoint.json.v1").read_text()) == v1
    assert await store(path).load() == claims


async def test_crash_between_temp_write_and_rename_leaves_the_old_file_valid(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = await prepared(path)
    before = path.read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut before rename")

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", crash)
        with pytest.raises(OSError, match="power cut"):
            await checkpoint.transition("uid-1", "UnprepareStarted")
    assert path.read_bytes() == before
    assert (await store(path).load())["uid-1"].state == "PrepareCompleted"
    assert checkpoint.get("uid-1") is not None
    assert checkpoint.claims()["uid-1"].state == "PrepareCompleted"  # the failed change was rolled back
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.json"]


async def test_temp_file_left_by_a_real_crash_is_ignored(path: Path) -> None:
    await prepared(path)
    leftover = path.with_name(".checkpoint.json.abc123.tmp")
    leftover.write_text('{"kind": "gpudra.dev/check')
    assert "uid-1" in await store(path).load()
    assert not leftover.exists()


async def test_different_claims_proceed_in_parallel(path: Path) -> None:
    checkpoint = store(path)
    await checkpoint.load()
    inside_a = asyncio.Event()
    release_a = asyncio.Event()

    async def slow_a() -> None:
        async with checkpoint.claim_lock("uid-a"):
            await checkpoint.transition("uid-a", "PrepareStarted", namespace="n", name="a")
            inside_a.set()
            await release_a.wait()
            await checkpoint.transition("uid-a", "PrepareCompleted")

    task = asyncio.create_task(slow_a())
    await inside_a.wait()
    # uid-a is still being prepared; uid-b is not blocked by it
    async with checkpoint.claim_lock("uid-b"):
        await checkpoint.transition("uid-b", "PrepareStarted", namespace="n", name="b")
        await checkpoint.transition("uid-b", "PrepareCompleted")
    assert not task.done()
    release_a.set()
    await task
    states = {uid: e.state for uid, e in (await store(path).load()).items()}
    assert states == {"uid-a": "PrepareCompleted", "uid-b": "PrepareCompleted"}


async def test_same_claim_is_serialized(path: Path) -> None:
    checkpoint = store(path)
    await checkpoint.load()
    order: list[str] = []

    async def work(tag: str) -> None:
        async with checkpoint.claim_lock("uid-1"):
            order.append(f"{tag}-in")
            await asyncio.sleep(0)
            order.append(f"{tag}-out")

    await asyncio.gather(work("first"), work("second"))
    assert order == ["first-in", "first-out", "second-in", "second-out"]


async def test_the_store_keeps_no_lock_for_claims_it_is_done_with(path: Path) -> None:
    """A node prepares claims for as long as it runs: a lock kept for every claim it ever locked grows its memory
    with each one (two thousand claims, about a quarter of a megabyte). A lock lives while someone holds or waits
    for it; the same claim is still serialized (test above)."""
    checkpoint = store(path)
    await checkpoint.load()
    here = tracemalloc.Filter(True, keyedlocks.__file__)

    async def lock_and_release(uid: str) -> None:
        async with checkpoint.claim_lock(uid):
            pass

    await asyncio.gather(*(lock_and_release(f"warm-{i}") for i in range(10)))
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces([here])
        for batch in range(20):
            await asyncio.gather(*(lock_and_release(f"uid-{batch}-{i}") for i in range(100)))
        after = tracemalloc.take_snapshot().filter_traces([here])
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 20_000, f"{grown} bytes held by the checkpoint module after 2,000 claims"


async def test_many_concurrent_writes_all_land(path: Path) -> None:
    checkpoint = store(path)
    await checkpoint.load()
    await asyncio.gather(
        *(checkpoint.transition(f"uid-{i}", "PrepareStarted", namespace="n", name=f"c{i}") for i in range(40))
    )
    assert len(await store(path).load()) == 40


BINDING = VfioBindingRecord(pci_bus_id="0000:1a:00.0", device_name="gpu-vfio-0")


async def test_the_passthrough_version_is_written_only_while_a_gpu_is_on_vfio(path: Path) -> None:
    s = store(path)
    await s.load()
    await s.transition("uid-1", "PrepareStarted", namespace="a", name="c", devices=[DEVICE])
    assert json.loads(path.read_text())["version"] == BASE_VERSION
    await s.transition("uid-2", "PrepareStarted", namespace="a", name="vm", vfio_bindings=[BINDING])
    assert json.loads(path.read_text())["version"] == CURRENT_VERSION == BASE_VERSION + 1
    assert (await store(path).load())["uid-2"].vfio_bindings == [BINDING]
    await s.remove("uid-2")
    assert json.loads(path.read_text())["version"] == BASE_VERSION  # readable by the release before again


async def test_an_agent_before_passthrough_refuses_a_passthrough_checkpoint_as_too_new(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback case: the older agent reads up to version 2. It must say "newer", keep the file aside with
    the passthrough claim in it, and never overwrite the original."""
    s = store(path)
    await s.load()
    await s.transition("uid-vm", "PrepareStarted", namespace="a", name="vm", vfio_bindings=[BINDING])
    written = path.read_bytes()
    monkeypatch.setattr(checkpoint_module, "CURRENT_VERSION", BASE_VERSION)
    older = store(path)
    with pytest.raises(CheckpointTooNew, match="newer gpudra"):
        await older.load()
    with pytest.raises(CheckpointError):
        await older.transition("uid-x", "PrepareStarted", namespace="a", name="x")
    assert path.read_bytes() == written
    (kept,) = path.parent.glob("checkpoint.json.unreadable-*")
    assert json.loads(kept.read_text())["payload"]["claims"]["uid-vm"]["vfio_bindings"] == [
        BINDING.model_dump(mode="json")
    ]


async def test_each_write_holds_every_change_whatever_was_encoded_before(path: Path) -> None:
    """A write encodes only the entries that changed since the last one: the file still holds each claim as it is
    now (names outside ASCII too), and its checksum is that of its payload."""
    checkpoint = store(path)
    await checkpoint.load()
    await checkpoint.transition("uid-1", "PrepareStarted", namespace="équipe", name="c-1")
    await checkpoint.transition("uid-2", "PrepareStarted", namespace="a", name="c-2")
    await checkpoint.transition("uid-1", "PrepareCompleted", cdi_spec="/cdi/1.json")
    await checkpoint.remove("uid-2")
    document = json.loads(path.read_bytes())
    assert document["checksum"] == checksum(document["payload"])
    (entry,) = (await store(path).load()).values()
    assert (entry.namespace, entry.state, entry.cdi_spec) == ("équipe", "PrepareCompleted", "/cdi/1.json")

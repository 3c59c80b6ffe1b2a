"""Device reservations: one holder per device (a prepared claim, a prepare under way, or the MIG applier), shareable
devices excepted, and a prepare that overlaps a repartition is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.agent.checkpoint import CheckpointStore, DeviceRecord
from gpudra.agent.miglayout.applier import HOLDER
from gpudra.agent.reservations import DeviceReservations
from gpudra.errors import PrepareError

NODE = "node-1"
GPU0, GPU1, GPU2 = (NODE, "gpu-0"), (NODE, "gpu-1"), (NODE, "gpu-2")


async def prepared(tmp_path: Path, claims: dict[str, list[str]]) -> CheckpointStore:
    """A loaded checkpoint with each claim (UID u-<name>, namespace team) prepared on the named devices."""
    store = CheckpointStore(tmp_path / "checkpoint.json", node=NODE, driver="gpu.nvidia.com")
    await store.load()
    for name, devices in claims.items():
        records = [DeviceRecord(pool_name=NODE, device_name=d) for d in devices]
        await store.transition(f"u-{name}", "PrepareStarted", namespace="team", name=name, devices=records)
        await store.transition(f"u-{name}", "PrepareCompleted", cdi_spec="spec.json")
    return store


def refusal(reservations: DeviceReservations, uid: str, keys: set[tuple[str, str]]) -> str:
    with pytest.raises(PrepareError) as caught, reservations.preparing(uid, keys):
        pass
    assert caught.value.reason == "DeviceInUse"
    return str(caught.value)


async def test_a_device_a_claim_holds_is_refused_to_another_claim_and_named_for_the_applier(
    tmp_path: Path,
) -> None:
    reservations = DeviceReservations(await prepared(tmp_path, {"train": ["gpu-0"]}))
    assert "device gpu-0 is already prepared for claim u-train" in refusal(reservations, "u-other", {GPU0})
    with reservations.preparing("u-train", {GPU0}):  # the kubelet repeating the same claim's prepare
        pass
    with reservations.preparing("u-other", {GPU1}):
        assert reservations.holders() == {GPU0: "team/train", GPU1: "u-other"}
    assert reservations.holders() == {GPU0: "team/train"}


async def test_two_prepares_under_way_cannot_take_the_same_device(tmp_path: Path) -> None:
    reservations = DeviceReservations(await prepared(tmp_path, {}))
    with reservations.preparing("u-a", {GPU0, GPU1}):
        assert "gpu-1 is already prepared for claim u-a" in refusal(reservations, "u-b", {GPU1, GPU2})
    with reservations.preparing("u-b", {GPU1, GPU2}):  # released when the first prepare ended
        pass


async def test_a_prepare_that_fails_releases_its_devices(tmp_path: Path) -> None:
    reservations = DeviceReservations(await prepared(tmp_path, {}))
    with pytest.raises(RuntimeError), reservations.preparing("u-a", {GPU0}):
        raise RuntimeError("the plan failed")
    assert reservations.holders() == {}


async def test_devices_that_allow_multiple_allocations_are_never_refused(tmp_path: Path) -> None:
    store = await prepared(tmp_path, {"train": ["gpu-0"]})
    reservations = DeviceReservations(store, shareable=lambda: ["gpu-0"])
    with reservations.preparing("u-a", {GPU0}), reservations.preparing("u-b", {GPU0}):
        pass


async def test_the_applier_reserves_only_free_devices_and_blocks_prepares_until_it_releases(
    tmp_path: Path,
) -> None:
    reservations = DeviceReservations(await prepared(tmp_path, {"train": ["gpu-0"], "infer": ["gpu-1"]}))
    assert reservations.reserve_devices(HOLDER, {GPU0, GPU1, GPU2}) == ["team/infer", "team/train"]
    assert reservations.holders() == {GPU0: "team/train", GPU1: "team/infer"}  # nothing was reserved
    assert reservations.reserve_devices(HOLDER, {GPU2}) == []
    assert "gpu-2 is already prepared for claim MIG repartitioning" in refusal(reservations, "u-new", {GPU2})
    reservations.release_devices(HOLDER)
    with reservations.preparing("u-new", {GPU2}):
        pass


async def test_the_applier_cannot_reserve_a_device_a_prepare_is_under_way_with(tmp_path: Path) -> None:
    reservations = DeviceReservations(await prepared(tmp_path, {}))
    with reservations.preparing("u-a", {GPU0}):
        assert reservations.reserve_devices(HOLDER, {GPU0}) == ["u-a"]


async def test_a_prepare_overlapping_a_repartition_is_refused(tmp_path: Path) -> None:
    reservations = DeviceReservations(await prepared(tmp_path, {}))
    with reservations.preparing("u-a", {GPU0}) as reservation:
        reservation.check_not_repartitioned()
        reservations.release_devices(HOLDER)  # nothing was reserved: the GPUs did not change
        reservation.check_not_repartitioned()
        assert reservations.reserve_devices(HOLDER, {GPU1}) == []
        reservations.release_devices(HOLDER)
        with pytest.raises(PrepareError) as caught:
            reservation.check_not_repartitioned()
    assert caught.value.reason == "Repartitioned"
    with reservations.preparing("u-a", {GPU0}) as retried:  # the kubelet's retry reads the GPUs anew
        retried.check_not_repartitioned()

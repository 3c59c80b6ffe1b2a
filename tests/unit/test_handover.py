"""The hand-over between two agent instances of one node, through the files of their shared state directory (with
a real node's flocks, and with the in-memory locks of the simulated nodes of one process); and the sockets each
instance names for itself."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpudra.agent.handover import ActiveRole, FileLocks, HandedOver, ProcessLocks
from gpudra.agent.kubeletplugin.plugin import (
    MAX_SOCKET_PATH_BYTES,
    instance_dra_socket,
    rolling_update_registration_socket,
)

Roles = Callable[[Path, str], ActiveRole]


@pytest.fixture(params=["flock", "in-process"])
def roles(request: pytest.FixtureRequest) -> Roles:
    """Makes the instances of one node: each with its own flocks, or all with the locks of their one process."""
    shared = ProcessLocks()
    return lambda state, instance: ActiveRole(
        state, instance, poll=0.02, locks=FileLocks() if request.param == "flock" else shared
    )


async def test_a_newer_instance_waits_for_the_operation_in_flight_then_takes_the_node(
    tmp_path: Path, roles: Roles
) -> None:
    old, new = roles(tmp_path, "old"), roles(tmp_path, "new")
    old.start()
    new.start()
    await old.acquire()
    old.open()
    entered, finish = asyncio.Event(), asyncio.Event()

    async def in_flight() -> None:
        async with old.operation():
            entered.set()
            await finish.wait()

    call = asyncio.create_task(in_flight())
    await asyncio.wait_for(entered.wait(), 5)
    holding = asyncio.create_task(old.hold())
    taking = asyncio.create_task(new.acquire())
    waiting = asyncio.ensure_future(new.operation().__aenter__())
    await asyncio.wait_for(old.yielding.wait(), 5)  # the old instance saw the new one ask
    done, _ = await asyncio.wait({holding, taking, waiting}, timeout=10 * old.poll)  # ten of their polls
    assert not done  # the call in flight holds the node
    finish.set()
    await asyncio.wait_for(holding, 5)
    old.release()
    await asyncio.wait_for(taking, 5)
    done, _ = await asyncio.wait({waiting}, timeout=10 * new.poll)
    assert not done  # the lock is not enough: the state is reloaded first
    new.open()
    await asyncio.wait_for(waiting, 5)  # the new instance's waiting call runs now
    assert new.active.is_set() and old.handed_to == "new"
    with pytest.raises(HandedOver, match="handed the node over to a newer one"):
        async with old.operation():
            pass
    await call
    old.stop()
    new.stop()


async def test_the_old_instance_takes_the_node_back_when_the_new_one_dies_first(
    tmp_path: Path, roles: Roles
) -> None:
    old, new = roles(tmp_path, "old"), roles(tmp_path, "new")
    old.start()
    await old.acquire()
    new.start()
    taking = asyncio.create_task(new.acquire())
    await asyncio.wait_for(old.hold(), 5)
    taking.cancel()
    new.stop()  # it dies before it got the lock
    old.release()
    await asyncio.wait_for(old.wait_orphaned(), 5)
    await asyncio.wait_for(old.acquire(), 5)
    old.open()
    async with old.operation():
        assert old.active.is_set()
    old.stop()


def test_two_processes_cannot_run_as_the_same_instance(tmp_path: Path, roles: Roles) -> None:
    first = roles(tmp_path, "same")
    first.start()
    with pytest.raises(Exception, match="another agent runs as instance 'same'"):
        roles(tmp_path, "same").start()
    first.stop()


async def test_in_process_locks_hold_no_open_file(tmp_path: Path) -> None:
    """A simulated node's agent in the ``gpudra up`` process: active, with no descriptor open for its locks (a
    fleet of thousands of nodes would otherwise need two of the process's open files a node)."""
    before = set(os.listdir("/proc/self/fd"))
    role = ActiveRole(tmp_path, "only", locks=ProcessLocks())
    role.start()
    await asyncio.wait_for(role.acquire(), 5)
    try:
        assert set(os.listdir("/proc/self/fd")) <= before
    finally:
        role.stop()


@pytest.mark.parametrize(
    ("directory_length", "driver", "expected"),
    [
        (20, "gpu.nvidia.com", "gpu.nvidia.com-5f6c1f0e-aaaa-bbbb-cccc-0123456789ab-reg.sock"),
        (60, "gpu.nvidia.com", "gpu.nvidia.com-"),  # the UID does not fit: a hash of it
        (65, "compute-domain.nvidia.com", "dra-"),  # nor does the driver with it: a hash of both
    ],
)
def test_registration_sockets_are_named_per_instance_as_the_kubelet_plugin_helper_names_them(
    directory_length: int, driver: str, expected: str
) -> None:
    registry = Path("/" + "r" * (directory_length - 1))
    name = rolling_update_registration_socket(registry, driver, "5f6c1f0e-aaaa-bbbb-cccc-0123456789ab")
    assert name.startswith(expected) and name.endswith("-reg.sock")
    assert len(str(registry / name)) <= MAX_SOCKET_PATH_BYTES


@pytest.mark.parametrize("directory_length", [10, 61, 62, 75])
def test_an_instance_dra_socket_fits_a_unix_socket_path(directory_length: int) -> None:
    """``dra-<instance>.sock`` where it fits (the kubelet finds it through the registration either way), else a
    digest of the instance id: a real kubelet's plugins directory under a temporary node root is that deep."""
    plugins = Path("/" + "p" * (directory_length - 1))
    instance = "5f6c1f0e-aaaa-bbbb-cccc-0123456789ab"
    path = instance_dra_socket(plugins, instance)
    assert path.parent == plugins and len(str(path)) <= MAX_SOCKET_PATH_BYTES
    assert (path.name == f"dra-{instance}.sock") == (directory_length <= 61)
    assert instance_dra_socket(plugins, instance.replace("a", "b")) != path


async def test_a_failed_look_for_a_newer_instance_keeps_the_node(tmp_path: Path, roles: Roles) -> None:
    """The request file cannot be read (as when the process is out of open files): no instance asked, so the active
    one keeps the node and goes on looking, instead of handing it over to nobody and taking it back."""
    role = roles(tmp_path, "only")
    role.start()
    await asyncio.wait_for(role.acquire(), 5)
    (tmp_path / "agent-takeover").unlink()
    (tmp_path / "agent-takeover").mkdir()  # reading it fails with an OSError
    holding = asyncio.create_task(role.hold())
    done, _ = await asyncio.wait({holding}, timeout=10 * role.poll)  # ten of its polls
    assert not done and not role.yielding.is_set() and role.handed_to == ""
    (tmp_path / "agent-takeover").rmdir()
    other = roles(tmp_path, "newer")
    other.start()
    asking = asyncio.create_task(other.acquire())
    await asyncio.wait_for(holding, 5)  # it looks again: a real request is still seen
    assert role.handed_to == "newer"
    role.release()
    await asyncio.wait_for(asking, 5)
    other.stop()
    role.stop()

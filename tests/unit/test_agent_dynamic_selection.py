"""Which GPUs the agent publishes as dynamic MIG: the policy, a MigLayout's choice over it, and MIG mode."""

from __future__ import annotations

from functools import cache

import pytest

from gpudra.agent.migdynamic.selection import DynamicSelection
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.simulated import simulated_backend

NODE = "n1"


@cache
def hardware() -> tuple[NodeInventory, tuple[MigProfileInfo, ...]]:
    """An H100 node: GPUs 0 and 1 with MIG mode on, the other six off."""
    backend = simulated_backend("dgx-h100", NODE).backend
    backend.set_mig_mode(0, True)
    backend.set_mig_mode(1, True)
    return backend.read_inventory(), backend.mig_profiles(0)


def uuids(*indices: int) -> frozenset[str]:
    inventory, _ = hardware()
    return frozenset(inventory.gpus[i].uuid for i in indices)


class CountingReader:
    def __init__(self) -> None:
        self.reads: list[int] = []

    def __call__(self, index: int) -> tuple[MigProfileInfo, ...]:
        self.reads.append(index)
        return hardware()[1]


def selection(policy: str = "Static", reader: CountingReader | None = None) -> DynamicSelection:
    return DynamicSelection(node=NODE, mig_policy=policy, read_profiles=reader or CountingReader())


@pytest.mark.parametrize(
    ("policy", "chosen", "dynamic"),
    [
        ("Static", None, ()),
        ("Dynamic", None, (0, 1)),  # every GPU with MIG mode on; those with MIG off stay whole
        ("Static", (1,), (1,)),  # a MigLayout's choice wins over the policy...
        ("Dynamic", (), ()),  # ...also when it chooses none
        ("Static", (0, 5), (0,)),  # GPU 5 has MIG mode off: published whole
    ],
)
def test_which_gpus_are_dynamic(
    policy: str, chosen: tuple[int, ...] | None, dynamic: tuple[int, ...]
) -> None:
    inventory, _ = hardware()
    gpus = selection(policy)
    if chosen is not None:
        gpus.choose(set(uuids(*chosen)))
    assert gpus.gpus(inventory) == uuids(*dynamic)
    assert set(gpus.profiles(inventory)) == uuids(*dynamic)


def test_no_reading_yet_means_no_dynamic_gpus() -> None:
    assert selection("Dynamic").gpus(None) == frozenset()


def test_choose_says_whether_the_choice_changed_and_none_goes_back_to_the_policy() -> None:
    inventory, _ = hardware()
    gpus = selection("Dynamic")
    assert not gpus.choose(None)  # already following the policy
    assert gpus.choose(set(uuids(1)))
    assert not gpus.choose(set(uuids(1)))
    assert gpus.gpus(inventory) == uuids(1)
    assert gpus.choose(None)
    assert gpus.gpus(inventory) == uuids(0, 1)


def test_profiles_are_read_once_per_gpu() -> None:
    inventory, profiles = hardware()
    reader = CountingReader()
    gpus = selection("Dynamic", reader)
    first = gpus.profiles(inventory)
    second = gpus.profiles(inventory)
    assert first == second == dict.fromkeys(uuids(0, 1), profiles)
    assert sorted(reader.reads) == [0, 1]

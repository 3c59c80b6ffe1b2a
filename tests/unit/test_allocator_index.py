"""The device index: selectors answered from attribute counts where that is provably what evaluating every device
would give (Kubernetes' lazy runtime errors included), and nodes skipped on upper bounds only when no selector
could fail on them."""

from __future__ import annotations

from random import Random
from typing import Any

from _allocator_kit import DRIVER, claim, gpu, gpus, make_allocator, match, picked, req, slice_
from hypothesis import given, settings
from hypothesis import strategies as st

from celgrammar import device, selector
from gpudra.allocator import Allocation, Failure, NodesFailure, celfacts
from gpudra.allocator.cel.selectors import CelCompileError, CelRuntimeError, compile_selector
from gpudra.allocator.index import DeviceIndex
from gpudra.allocator.pools import make_entry
from gpudra.api.dra import ResourceSlice

B300 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B300"'
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


def evaluated(allocator: Any) -> int:
    """How many (device, selector) outcomes the allocator has computed so far."""
    return sum(len(e.matches) for p in allocator.snapshot.pools() for e in p.entries)


def test_a_model_no_node_has_is_answered_without_evaluating_a_device() -> None:
    allocator = make_allocator([gpus(f"n{i}", 8) for i in range(20)], real_cel=True)
    outcome = allocator.find_node([claim("c", req("gpu", "gpu.nvidia.com", B300))])
    assert isinstance(outcome, NodesFailure)
    assert outcome.by_reason == {"NoMatchingDevice": 20}
    assert evaluated(allocator) == 0
    assert isinstance(allocator.find_node([claim("d", req("gpu", "gpu.nvidia.com", H100))]), Allocation)


def test_a_device_on_which_the_selector_fails_still_aborts_the_attempt() -> None:
    """One device lacks productName: Kubernetes' search reaches it and stops with an error that aborts the pod's
    scheduling attempt; the index cannot rule that out, so the node is searched as before."""
    broken = slice_("n3", [gpu("gpu-0"), gpu("gpu-1")])
    assert broken.spec.devices is not None and broken.spec.devices[1].attributes is not None
    del broken.spec.devices[1].attributes["productName"]
    allocator = make_allocator([*(gpus(f"n{i}", 2) for i in range(3)), broken], real_cel=True)
    outcome = allocator.find_node([claim("c", req("gpu", "gpu.nvidia.com", B300))])
    assert isinstance(outcome, Failure)
    assert (outcome.node, outcome.reason) == ("n3", "InvalidSelector")
    assert outcome.aborts.startswith("claim default/c: selector #0 on device gpu.nvidia.com/n3/gpu-1: ")


def test_nodes_without_enough_devices_sharing_a_value_are_skipped_before_any_search() -> None:
    allocator = make_allocator([gpus(f"n{i:02d}", 8) for i in range(30)], real_cel=True, detail_nodes=2)
    four = claim("four", req("gpu", "gpu.nvidia.com", count=4), constraints=[match("gpu.nvidia.com/uuid")])
    outcome = allocator.find_node([four])
    assert isinstance(outcome, NodesFailure)
    assert outcome.by_reason == {"ConstraintConflict": 30}
    searched = {p.key.pool for p in allocator.snapshot.pools() if any(e.matches for e in p.entries)}
    assert searched == {"n00", "n01"}  # the two explained in detail


def _asked(allocator: Any) -> list[str]:
    """Records the nodes whose free devices the allocator counts from now on (it does so for every node it
    looks at)."""
    asked: list[str] = []
    counts = allocator.snapshot.node_counts

    def counting(node: str) -> Any:
        asked.append(node)
        return counts(node)

    allocator.snapshot.node_counts = counting
    return asked


def test_a_claim_larger_than_every_node_is_answered_without_visiting_each_node() -> None:
    """Past the nodes explained in detail, the cluster's bounds (the most devices one node has, the most that
    share one value) answer for every other node at once, with the counts visiting them would give."""
    slices = [gpus(f"n{i:02d}", 8) for i in range(30)]
    nine = claim("nine", req("gpu", "gpu.nvidia.com", count=9))
    nine_alike = claim(
        "alike", req("gpu", "gpu.nvidia.com", count=9), constraints=[match("gpu.nvidia.com/uuid")]
    )
    four_alike = claim(
        "four", req("gpu", "gpu.nvidia.com", count=4), constraints=[match("gpu.nvidia.com/uuid")]
    )
    for c in (nine, nine_alike, four_alike):
        bounded = make_allocator(slices, real_cel=True, detail_nodes=2)
        asked = _asked(bounded)
        outcome = bounded.find_node([c])
        every = make_allocator(slices, real_cel=True, detail_nodes=30).find_node([c])
        assert isinstance(outcome, NodesFailure) and isinstance(every, NodesFailure)
        assert outcome.by_reason == every.by_reason
        assert sum(outcome.by_reason.values()) == 30
        assert asked == ["n00", "n01"]


def test_the_cluster_bounds_follow_the_slices() -> None:
    allocator = make_allocator([gpus(f"n{i:02d}", 8) for i in range(30)], real_cel=True, detail_nodes=2)
    nine = claim("nine", req("gpu", "gpu.nvidia.com", count=9))
    assert isinstance(allocator.find_node([nine]), NodesFailure)
    big = gpus("n30", 12)
    allocator.snapshot.add_slice(big)
    found = allocator.find_node([nine])
    assert isinstance(found, Allocation)
    assert found.node == "n30"
    allocator.snapshot.remove_slice(big.metadata.name or "")
    outcome = allocator.find_node([claim("again", req("gpu", "gpu.nvidia.com", count=9))])
    assert isinstance(outcome, NodesFailure)
    assert outcome.by_reason == {"InsufficientDevices": 30}


def test_nodes_are_visited_one_by_one_when_a_selector_could_fail_on_some_device() -> None:
    """Until the node whose device fails the selector: Kubernetes' error there aborts the attempt."""
    odd = slice_("n29", [gpu(f"gpu-{i}", flavour=1 if i else "x") for i in range(8)])
    allocator = make_allocator([*(gpus(f"n{i:02d}", 8, flavour=1) for i in range(29)), odd], real_cel=True,
                               detail_nodes=2)  # fmt: skip
    asked = _asked(allocator)
    nine = claim(
        "nine", req("gpu", "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].flavour > 0', count=9)
    )
    outcome = allocator.find_node([nine])
    assert isinstance(outcome, Failure)
    assert (outcome.node, outcome.reason) == ("n29", "InvalidSelector") and outcome.aborts
    assert len(asked) == 30


def test_a_node_where_a_selector_could_fail_is_searched_even_when_it_cannot_hold_the_claim() -> None:
    odd = slice_("n29", [gpu(f"gpu-{i}", flavour=1 if i else "x") for i in range(8)])
    allocator = make_allocator([*(gpus(f"n{i:02d}", 8, flavour=1) for i in range(29)), odd], real_cel=True,
                               detail_nodes=2)  # fmt: skip
    four = claim(
        "four",
        req("gpu", "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].flavour > 0', count=4),
        constraints=[match("gpu.nvidia.com/uuid")],
    )
    outcome = allocator.find_node([four])
    assert isinstance(outcome, Failure)  # gpu-0 of n29: "x" > 0 has no overload
    assert (outcome.node, outcome.reason) == ("n29", "InvalidSelector") and outcome.aborts


def test_too_few_free_devices_is_not_the_answer_when_a_free_one_fails_the_selector() -> None:
    """Kubernetes evaluates the selectors on free devices: with one of them failing, the node's answer is the
    error, not that too few are free."""
    devices = [gpu(f"gpu-{i}", flavour=1) for i in range(3)] + [gpu("gpu-3", flavour="x")]
    allocator = make_allocator([slice_("n1", devices)], real_cel=True)
    pick = claim(
        "c", req("gpu", "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].flavour > 0', count=5)
    )
    outcome = allocator.find_node([pick])
    assert isinstance(outcome, Failure)
    assert (outcome.node, outcome.reason) == ("n1", "InvalidSelector") and outcome.aborts
    healthy = make_allocator([gpus("n1", 4, flavour=1)], real_cel=True).find_node([pick])
    assert isinstance(healthy, NodesFailure)
    assert healthy.by_reason == {"InsufficientDevices": 1}


def test_the_index_follows_slices_as_they_change() -> None:
    allocator = make_allocator([gpus("n1", 2)], real_cel=True)
    b300 = claim("c", req("gpu", "gpu.nvidia.com", B300))
    assert isinstance(allocator.find_node([b300]), NodesFailure)
    allocator.snapshot.add_slice(gpus("n2", 1, product="NVIDIA B300"))
    found = allocator.find_node([b300])
    assert isinstance(found, Allocation)
    assert found.node == "n2"
    assert (
        set(allocator.snapshot.index.groups)
        and sum(g.count for g in allocator.snapshot.index.groups.values()) == 3
    )


def test_a_node_whose_devices_all_pass_takes_them_without_evaluating_one() -> None:
    allocator = make_allocator([gpus(f"n{i}", 4) for i in range(3)], real_cel=True)
    found = allocator.find_node([claim("c", req("gpu", "gpu.nvidia.com", H100, count=2))])
    assert isinstance(found, Allocation)
    assert [r.device for r in picked(found)] == ["gpu-0", "gpu-1"]
    assert evaluated(allocator) == 0
    # One B300 in the fleet: now the index cannot promise H100 for every device of the group, so they are looked at.
    allocator.snapshot.add_slice(gpus("n3", 1, product="NVIDIA B300"))
    again = allocator.find_node([claim("d", req("gpu", "gpu.nvidia.com", H100, count=2))])
    assert isinstance(again, Allocation)
    assert evaluated(allocator) > 0


def test_an_older_generation_seen_from_a_node_is_evaluated_device_by_device() -> None:
    """n1 sees only the pool's older generation, which the index does not count: its A100 must not pass an H100
    selector because the newest generation (n2's) holds H100s only."""
    a100 = "NVIDIA A100-SXM4-40GB"
    allocator = make_allocator(
        [
            slice_("n1", [gpu("gpu-0", a100)], pool="shared", generation=1, count=1, name="shared-a"),
            slice_("n2", [gpu("gpu-9")], pool="shared", generation=2, count=1, name="shared-b"),
        ],
        real_cel=True,
    )
    outcome = allocator.allocate("n1", [claim("c", req("gpu", "gpu.nvidia.com", H100))])
    assert not isinstance(outcome, Allocation)
    taken = allocator.allocate("n1", [claim("d", req("gpu", "gpu.nvidia.com"))])
    assert isinstance(taken, Allocation)
    assert [r.device for r in picked(taken)] == ["gpu-0"]


def _entries(r: Random, n: int) -> list[Any]:
    wire = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [device(r, f"d{i}") for i in range(n)],
        },
    }
    s = ResourceSlice.model_validate(wire)
    return [make_entry(s, d) for d in s.spec.devices or ()]


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_what_the_index_promises_holds_on_every_device(r: Random) -> None:
    """celfacts is sound: an answer it rules out for a group of devices is given by none of them."""
    try:
        compiled = compile_selector(selector(r))
    except CelCompileError:
        return
    if compiled.tree is None:
        return
    entries = _entries(r, 12)
    index = DeviceIndex()
    index.add(entries)
    for group in index.groups.values():
        promised = celfacts.outcomes(compiled.tree, group)
        for entry in (e for e in entries if e.schema == group.schema):
            try:
                got = celfacts.TRUE if compiled.matches(entry.view) else celfacts.FALSE
            except CelRuntimeError:
                got = celfacts.ERROR
            assert got & promised, f"{compiled.expression} on {entry.view}: {got} not in {promised}"


def test_the_index_decides_the_common_selectors() -> None:
    """Without this the property above could pass on an index that promises nothing."""
    entries = [make_entry(gpus("n", 1), d) for d in (gpus("n", 1).spec.devices or ())]
    index = DeviceIndex()
    index.add(entries)
    (group,) = index.groups.values()
    for expression, answers in [
        (B300, celfacts.FALSE),
        (H100, celfacts.TRUE),
        ('device.driver == "gpu.nvidia.com" && !has(device.attributes["gpudra.dev"].sharing)', celfacts.TRUE),
        ('device.attributes["gpu.nvidia.com"].productName in ["NVIDIA A100", "NVIDIA L4"]', celfacts.FALSE),
        (
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
            celfacts.TRUE | celfacts.FALSE,
        ),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == "9.0.0"', celfacts.ERROR),
        ('device.attributes["gpu.nvidia.com"].nvlink == true', celfacts.ERROR),
        ('device.attributes["gpu.nvidia.com"].nvlink == true && device.driver == "x"', celfacts.FALSE),
    ]:
        tree = compile_selector(expression).tree
        assert tree is not None
        assert celfacts.outcomes(tree, group) == answers, expression


def test_an_error_on_a_node_after_the_first_fit_aborts_the_attempt_in_a_small_cluster() -> None:
    """kube-scheduler filters every node of a cluster under 100 nodes: an error on a node after the one that
    fits still aborts the attempt; in a larger cluster the first fit is taken."""
    odd = slice_("nz", [gpu(f"gpu-{i}", flavour=1 if i else "x") for i in range(2)])
    pick = claim("c", req("gpu", "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].flavour > 0'))
    small = make_allocator([gpus("n00", 2, flavour=1), odd], real_cel=True)
    outcome = small.find_node([pick])
    assert isinstance(outcome, Failure)
    assert (outcome.node, outcome.reason) == ("nz", "InvalidSelector") and outcome.aborts
    large = make_allocator([*(gpus(f"n{i:03d}", 2, flavour=1) for i in range(100)), odd], real_cel=True)
    found = large.find_node([pick])
    assert isinstance(found, Allocation) and found.node == "n000"

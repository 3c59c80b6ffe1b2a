"""Properties: the allocator gives exactly the answer of Kubernetes' depth-first search written naively (no
pruning; selectors evaluated lazily, device by device, after the in-use check, so a selector failing at runtime
fails the allocation only when the search reaches a free device it fails on), never a device twice, and
constraints always hold."""

from __future__ import annotations

from typing import Any

from _allocator_kit import claim, distinct, gpu, make_allocator, match, picked, req, slice_
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.allocator import Allocation, Failure
from gpudra.api.dra import DeviceConstraint

Dev = tuple[str, int | None, int]  # name, model (None: the device lacks the attribute), group
ERROR = "error"


class _Stop(Exception):
    """The naive search reached a free device its selector fails on."""


def naive(
    devices: list[Dev], requests: list[tuple[str, int, int | None]], cons: list[tuple[str, bool]]
) -> list[str] | str | None:
    """Kubernetes' algorithm without any pruning: slot by slot, the devices after the request's previous one."""
    picked: list[tuple[str, Dev]] = []

    def ok(name: str, dev: Dev) -> bool:
        for cons_req, is_distinct in cons:
            if cons_req not in ("*", name):
                continue
            values = [d[2] for r, d in picked if cons_req in ("*", r)]
            if is_distinct and dev[2] in values:
                return False
            if not is_distinct and values and values[0] != dev[2]:
                return False
        return True

    def slot(ri: int, k: int, start: int) -> bool:
        if ri == len(requests):
            return True
        name, count, model = requests[ri]
        if k == count:
            return slot(ri + 1, 0, 0)
        for i in range(start, len(devices)):
            dev = devices[i]
            if any(d is dev for _, d in picked):
                continue  # in use: skipped before the selector is evaluated
            if model is not None and dev[1] is None:
                raise _Stop  # CEL: no such key
            if model is not None and dev[1] != model:
                continue
            if not ok(name, dev):
                continue
            picked.append((name, dev))
            if slot(ri, k + 1, i + 1):
                return True
            picked.pop()
        return False

    try:
        return [f"{r}:{d[0]}" for r, d in picked] if slot(0, 0, 0) else None
    except _Stop:
        return ERROR


@st.composite
def problems(draw: st.DrawFn) -> Any:
    n = draw(st.integers(1, 6))
    devices = [
        (f"gpu-{i}", draw(st.one_of(st.integers(0, 1), st.none())), draw(st.integers(0, 2))) for i in range(n)
    ]
    nreq = draw(st.integers(1, 3))
    requests = [
        (f"r{i}", draw(st.integers(1, 3)), draw(st.one_of(st.none(), st.integers(0, 1)))) for i in range(nreq)
    ]
    cons = draw(
        st.lists(st.tuples(st.sampled_from(["*"] + [r[0] for r in requests]), st.booleans()), max_size=2)
    )
    return devices, requests, cons


def run(devices: list[Dev], requests: list[tuple[str, int, int | None]], cons: list[tuple[str, bool]]) -> Any:
    slices = [
        slice_(
            "n1",
            [
                gpu(name, group=group) if model is None else gpu(name, group=group, model=model)
                for name, model, group in devices
            ],
        )
    ]
    reqs = [
        req(
            name,
            "gpu.nvidia.com",
            *([f'device.attributes["gpu.nvidia.com"].model == {m}'] if m is not None else []),
            count=count,
        )
        for name, count, m in requests
    ]
    constraints: list[DeviceConstraint] = [
        (distinct if is_distinct else match)("gpu.nvidia.com/group", *([] if r == "*" else [r]))
        for r, is_distinct in cons
    ]
    allocator = make_allocator(slices, real_cel=True)
    return allocator.allocate("n1", [claim("c", *reqs, constraints=constraints or None)])


@settings(max_examples=300, deadline=None)
@given(problems())
def test_same_answer_as_kubernetes_naive_search(problem: Any) -> None:
    devices, requests, cons = problem
    expected = naive(devices, requests, cons)
    outcome = run(devices, requests, cons)
    if expected is None:
        assert isinstance(outcome, Failure)
        assert outcome.reason and outcome.reason != "InvalidSelector", outcome
    elif expected == ERROR:
        assert isinstance(outcome, Failure)
        assert outcome.reason == "InvalidSelector", outcome
    else:
        assert isinstance(outcome, Allocation), outcome
        results = picked(outcome)
        got = [f"{r.request}:{r.device}" for r in results]
        assert got == expected
        assert len({r.device for r in results}) == len(results)  # never a device twice
        groups = {d[0]: d[2] for d in devices}
        for r, is_distinct in cons:
            values = [groups[x.device] for x in results if r in ("*", x.request)]
            if is_distinct:
                assert len(set(values)) == len(values)
            else:
                assert len(set(values)) <= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=12))
def test_shares_never_exceed_capacity(requests_gi: list[int]) -> None:
    """A multi-allocatable device may appear many times, but its shares never exceed its capacity."""
    allocator = make_allocator([slice_("n1", [gpu("gpu-0", multi=True, memory="64Gi")])])
    total = 0
    for i, gi in enumerate(requests_gi):
        outcome = allocator.allocate("n1", [claim(f"c{i}", req(capacity={"memory": f"{gi}Gi"}))])
        if isinstance(outcome, Allocation):
            allocator.commit(outcome)
            total += gi
            assert total <= 64
        else:
            assert total + gi > 64

"""Builders for allocator tests: NVIDIA-style devices and slices, claims, and a tiny fake CEL compiler.

The fake compiler understands clauses joined by ``&&``:
``device.attributes["<domain>"].<name> == <literal>`` (also ``!=``),
``device.capacity["<domain>"].<name> >= <q>``,
``true``; ``boom`` raises a runtime error on every device; anything with ``(`` fails to compile.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudra.allocator import Allocation, Allocator, ClusterSnapshot
from gpudra.api.dra import (
    CapacityRequirements,
    CELDeviceSelector,
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceClaim,
    DeviceClass,
    DeviceClassConfiguration,
    DeviceClassSpec,
    DeviceConstraint,
    DeviceCounterConsumption,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceSubRequest,
    DeviceTaint,
    DeviceToleration,
    ExactDeviceRequest,
    OpaqueDeviceConfiguration,
    ResourceClaim,
    ResourceClaimSpec,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from gpudra.api.meta import ObjectMeta
from gpudra.api.quantity import parse_quantity
from gpudra.errors import InvalidInputError

DRIVER = "gpu.nvidia.com"
GPU_CLASS = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
MIG_CLASS = 'device.attributes["gpu.nvidia.com"].type == "mig"'


class FakeCompileError(InvalidInputError):
    pass


class FakeRuntimeError(InvalidInputError):
    pass


_CLAUSE = re.compile(r'^device\.(attributes|capacity)\["([^"]+)"\]\.(\w+)\s*(==|!=|>=)\s*(.+)$')


@dataclass(frozen=True)
class FakeSelector:
    expression: str
    predicate: Callable[[Any], bool]

    def matches(self, device: Any) -> bool:
        return self.predicate(device)


def _literal(text: str) -> Any:
    text = text.strip()
    if text.startswith('"'):
        return ("string", text.strip('"'))
    if text in ("true", "false"):
        return ("bool", text == "true")
    return ("int", int(text))


def _lookup(view: tuple[str, Device], kind: str, domain: str, name: str) -> Any:
    driver, device = view
    table: dict[str, Any] = (
        dict(device.attributes or {}) if kind == "attributes" else dict(device.capacity or {})
    )
    value = table.get(f"{domain}/{name}")
    if value is None and domain == driver:
        value = table.get(name)
    return value


def fake_compile(expression: str) -> FakeSelector:
    if "(" in expression:
        raise FakeCompileError(f"syntax error in {expression!r}")
    clauses = [c.strip() for c in expression.split("&&")]
    preds: list[Callable[[Any], bool]] = []
    for clause in clauses:
        if clause == "true":
            preds.append(lambda v: True)
            continue
        if clause == "boom":

            def boom(v: Any) -> bool:
                raise FakeRuntimeError("no such key: boom")

            preds.append(boom)
            continue
        m = _CLAUSE.match(clause)
        if m is None:
            raise FakeCompileError(f"unsupported clause {clause!r}")
        kind, domain, name, op, lit = m.groups()
        if kind == "capacity":
            want = parse_quantity(lit.strip())

            def at_least(v: Any, d: str = domain, n: str = name, w: Any = want) -> bool:
                c = _lookup(v, "capacity", d, n)
                return c is not None and bool(parse_quantity(c.value) >= w)

            preds.append(at_least)
            continue
        expected = _literal(lit)

        def pred(v: Any, d: str = domain, n: str = name, e: Any = expected, o: str = op) -> bool:
            a = _lookup(v, "attributes", d, n)
            if a is None:
                return o == "!="
            same = (a.kind, a.value) == e
            return same if o == "==" else not same

        preds.append(pred)
    return FakeSelector(expression, lambda v: all(p(v) for p in preds))


def fake_view(driver: str, device: Device) -> tuple[str, Device]:
    return (driver, device)


# ---------------------------------------------------------------- devices and slices


def attr(value: Any) -> DeviceAttribute:
    if isinstance(value, list):  # a list attribute (DRAListTypeAttributes), of the first value's kind
        kind = "bools" if isinstance(value[0], bool) else "ints" if isinstance(value[0], int) else "strings"
        return DeviceAttribute.model_validate({kind: value})
    if isinstance(value, bool):
        return DeviceAttribute(bool=value)
    if isinstance(value, int):
        return DeviceAttribute(int=value)
    return DeviceAttribute(string=value)


def gpu(
    name: str,
    product: str = "NVIDIA H100 80GB HBM3",
    *,
    memory: str = "80Gi",
    taints: list[DeviceTaint] | None = None,
    multi: bool = False,
    capacity: dict[str, DeviceCapacity] | None = None,
    consumes: list[DeviceCounterConsumption] | None = None,
    **extra: Any,
) -> Device:
    attrs = {
        "type": attr("gpu"),
        "productName": attr(product),
        "uuid": attr(f"GPU-{name}"),
        "cudaComputeCapability": DeviceAttribute(version="9.0.0"),
    }
    attrs.update({k: attr(v) for k, v in extra.items()})
    caps = {"memory": DeviceCapacity(value=memory)}
    caps.update(capacity or {})
    return Device(
        name=name,
        attributes=attrs,
        capacity=caps,
        taints=taints,
        allow_multiple_allocations=multi or None,
        consumes_counters=consumes,
    )


def mig(name: str, parent: str, profile: str, memory: str = "10Gi", **consume: int) -> Device:
    return Device(
        name=name,
        attributes={
            "type": attr("mig"),
            "productName": attr("NVIDIA A100-SXM4-40GB"),
            "parentUUID": attr(f"GPU-{parent}"),
            "profile": attr(profile),
            "uuid": attr(f"MIG-{name}"),
        },
        capacity={"memory": DeviceCapacity(value=memory)},
        consumes_counters=[
            DeviceCounterConsumption(
                counter_set=f"{parent}-counter-set",
                counters={k.replace("_", "-"): Counter(value=str(v)) for k, v in consume.items()},
            )
        ]
        if consume
        else None,
    )


_names = itertools.count()


def slice_(
    node: str | None,
    devices: list[Device],
    *,
    pool: str | None = None,
    generation: int = 0,
    count: int = 1,
    name: str | None = None,
    counters: list[CounterSet] | None = None,
    node_selector: dict[str, Any] | None = None,
    all_nodes: bool | None = None,
) -> ResourceSlice:
    return ResourceSlice(
        metadata=ObjectMeta(name=name or f"{node or 'shared'}-{DRIVER}-{next(_names):05d}"),
        spec=ResourceSliceSpec(
            driver=DRIVER,
            pool=ResourcePool(
                name=pool or node or "shared", generation=generation, resource_slice_count=count
            ),
            node_name=node if node_selector is None and not all_nodes else None,
            node_selector=node_selector,
            all_nodes=all_nodes,
            devices=devices or None,
            shared_counters=counters,
        ),
    )


def counter_set(name: str, **values: int) -> CounterSet:
    return CounterSet(
        name=name, counters={k.replace("_", "-"): Counter(value=str(v)) for k, v in values.items()}
    )


def gpus(node: str, n: int, product: str = "NVIDIA H100 80GB HBM3", **extra: Any) -> ResourceSlice:
    return slice_(node, [gpu(f"gpu-{i}", product, **extra) for i in range(n)])


# ---------------------------------------------------------------- classes and claims


def device_class(name: str, expression: str | None, config: dict[str, Any] | None = None) -> DeviceClass:
    return DeviceClass(
        metadata=ObjectMeta(name=name),
        spec=DeviceClassSpec(
            selectors=[DeviceSelector(cel=CELDeviceSelector(expression=expression))] if expression else None,
            config=[
                DeviceClassConfiguration(opaque=OpaqueDeviceConfiguration(driver=DRIVER, parameters=config))
            ]
            if config
            else None,
        ),
    )


CLASSES = [device_class("gpu.nvidia.com", GPU_CLASS), device_class("mig.nvidia.com", MIG_CLASS)]


def sel(*exprs: str) -> list[DeviceSelector]:
    return [DeviceSelector(cel=CELDeviceSelector(expression=e)) for e in exprs]


def req(
    name: str = "gpu",
    cls: str = "gpu.nvidia.com",
    *selectors: str,
    count: int | None = None,
    mode: str | None = None,
    admin: bool | None = None,
    tolerations: list[DeviceToleration] | None = None,
    capacity: dict[str, str] | None = None,
) -> DeviceRequest:
    return DeviceRequest(
        name=name,
        exactly=ExactDeviceRequest(
            device_class_name=cls,
            selectors=sel(*selectors) or None,
            count=count,
            allocation_mode=mode,
            admin_access=admin,
            tolerations=tolerations,
            capacity=CapacityRequirements(requests=capacity) if capacity else None,
        ),
    )


def sub(
    name: str, cls: str = "gpu.nvidia.com", *selectors: str, count: int | None = None, mode: str | None = None
) -> DeviceSubRequest:
    return DeviceSubRequest(
        name=name,
        device_class_name=cls,
        selectors=sel(*selectors) or None,
        count=count,
        allocation_mode=mode,
    )


def first_available(name: str, *subs: DeviceSubRequest) -> DeviceRequest:
    return DeviceRequest(name=name, first_available=list(subs))


def match(attribute: str, *requests: str) -> DeviceConstraint:
    return DeviceConstraint(match_attribute=attribute, requests=list(requests) or None)


def distinct(attribute: str, *requests: str) -> DeviceConstraint:
    return DeviceConstraint(distinct_attribute=attribute, requests=list(requests) or None)


def claim(
    name: str,
    *requests: DeviceRequest,
    constraints: list[DeviceConstraint] | None = None,
    config: list[Any] | None = None,
    namespace: str = "default",
) -> ResourceClaim:
    return ResourceClaim(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=ResourceClaimSpec(
            devices=DeviceClaim(requests=list(requests), constraints=constraints, config=config)
        ),
    )


def make_allocator(
    slices: list[ResourceSlice],
    classes: list[DeviceClass] | None = None,
    *,
    real_cel: bool = False,
    **kwargs: Any,
) -> Allocator:
    """An allocator over ``slices`` with the fake CEL compiler, or gpudra's real one (``real_cel``)."""
    ids = (f"share-{i}" for i in itertools.count(1))
    kwargs.setdefault("share_id", lambda: next(ids))
    if not real_cel:
        kwargs.setdefault("compile_selector", fake_compile)
        kwargs.setdefault("device_view", fake_view)
    return Allocator(ClusterSnapshot(slices), classes if classes is not None else CLASSES, **kwargs)


@dataclass
class Case:
    """One table case: the Kubernetes behaviour it mirrors, the cluster, the pod's claims, and the expected
    results (``request:device`` in order) or ``!Reason`` of the failure. ``real_cel`` uses gpudra's CEL instead
    of the fake compiler (for runtime errors as Kubernetes raises them)."""

    id: str
    mirrors: str
    slices: list[ResourceSlice]
    claims: list[ResourceClaim]
    expect: list[str] | str
    node: str = "n1"
    allocated: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    real_cel: bool = False


def picked(outcome: Allocation, claim_index: int = 0) -> list[DeviceRequestAllocationResult]:
    """The devices the allocation gave one of its claims."""
    devices = outcome.claims[claim_index].result.devices
    assert devices is not None, "the allocation has no devices"
    return list(devices.results or [])

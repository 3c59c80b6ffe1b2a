"""DeviceTaintRules and NoExecute taints, as kube-scheduler and kube-controller-manager read them. Pure.

kube-scheduler's allocator sees every slice with the taints of the DeviceTaintRules that select its devices
appended (k8s.io/dynamic-resource-allocation/resourceslice/tracker): a rule selects a device when every one of
driver, pool and device that it sets matches; a rule without a selector selects nothing. The device-taint eviction
controller evicts the pods of an allocated claim when one of its devices has a NoExecute taint (from the slice or
from a rule) that the allocation result does not tolerate: only tolerations with effect NoExecute count there, one
without ``tolerationSeconds`` tolerates for good, otherwise eviction starts ``tolerationSeconds`` after the taint's
``timeAdded`` (the shortest such toleration wins), and the claim's eviction time is the earliest of its taints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpudra.allocator.requests import tolerated
from gpudra.api.dra import (
    DeviceRequestAllocationResult,
    DeviceTaint,
    DeviceTaintRule,
    ResourceSlice,
)
from gpudra.api.timestamps import parse_rfc3339

DeviceTaints = Callable[[str, str, str], Sequence[DeviceTaint]]
"""(driver, pool, device) -> the taints its ResourceSlice publishes for it (empty when it is not published)."""


def unsupported_selector(rule: DeviceTaintRule) -> bool:
    """A v1alpha3 rule (Kubernetes 1.34) selecting by DeviceClass or CEL: fields Kubernetes dropped in 1.35, which
    gpudra's stand-ins do not evaluate; such a rule selects nothing there."""
    selector = rule.spec.device_selector
    return selector is not None and bool(selector.device_class_name or selector.selectors)


def rule_selects(rule: DeviceTaintRule, driver: str, pool: str, device: str) -> bool:
    selector = rule.spec.device_selector
    if selector is None or unsupported_selector(rule):
        return False
    return (
        (selector.driver is None or selector.driver == driver)
        and (selector.pool is None or selector.pool == pool)
        and (selector.device is None or selector.device == device)
    )


def taint_slice(slice_: ResourceSlice, rules: Iterable[DeviceTaintRule]) -> ResourceSlice:
    """The slice as the allocator sees it: each device's taints followed by those of the rules selecting it (the
    same object when no rule selects any of its devices)."""
    spec = slice_.spec
    relevant = [
        r
        for r in rules
        if r.spec.device_selector is not None
        and r.spec.device_selector.driver in (None, spec.driver)
        and r.spec.device_selector.pool in (None, spec.pool.name)
    ]
    if not relevant:
        return slice_
    devices = list(spec.devices or ())
    changed = False
    for i, device in enumerate(devices):
        added = [r.spec.taint for r in relevant if rule_selects(r, spec.driver, spec.pool.name, device.name)]
        if added:
            devices[i] = device.model_copy(update={"taints": [*(device.taints or ()), *added]})
            changed = True
    if not changed:
        return slice_
    return slice_.model_copy(update={"spec": spec.model_copy(update={"devices": devices})})


@dataclass(frozen=True, slots=True)
class Eviction:
    """When the pods of a claim are to be evicted (unix seconds) and which taints make it so."""

    at: float
    taints: tuple[str, ...]


def _seconds(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    return parse_rfc3339(stamp).timestamp()


def claim_eviction(
    results: Sequence[DeviceRequestAllocationResult],
    published: DeviceTaints,
    rules: Iterable[DeviceTaintRule],
) -> Eviction | None:
    """The eviction of an allocated claim's pods (None: no untolerated NoExecute taint on its devices)."""
    evicting = [r for r in rules if r.spec.taint.effect == "NoExecute"]
    when: float | None = None
    reasons: set[str] = set()
    for result in results:
        taints = [t for t in published(result.driver, result.pool, result.device) if t.effect == "NoExecute"]
        taints += [
            r.spec.taint for r in evicting if rule_selects(r, result.driver, result.pool, result.device)
        ]
        for taint in taints:
            start = _eviction_start(taint, result)
            if start is None:
                continue
            reasons.add(f"{taint.key}={taint.value or ''}:{taint.effect}")
            when = start if when is None else min(when, start)
    return None if when is None else Eviction(at=when, taints=tuple(sorted(reasons)))


def _eviction_start(taint: DeviceTaint, result: DeviceRequestAllocationResult) -> float | None:
    """When the taint evicts this result's pods; None when a NoExecute toleration without a limit tolerates it."""
    limit: int | None = None
    for toleration in result.tolerations or ():
        if toleration.effect != "NoExecute" or not tolerated(taint, [toleration]):
            continue
        if toleration.toleration_seconds is None:
            return None
        seconds = max(toleration.toleration_seconds, 0)
        limit = seconds if limit is None else min(limit, seconds)
    return _seconds(taint.time_added) + (limit or 0)

"""Arithmetic of shared counters (partitionable devices) and consumable capacity (multi-allocatable devices).

Consumable capacity follows Kubernetes' rules: every published capacity of the device is consumed, by the
requested amount rounded up by the capacity's requestPolicy (validRange: up to ``min`` then to the next
``step`` from ``min``; validValues: up to the next listed value), or, when not requested, by the policy's
default or else the whole capacity. A rounded amount that still violates the policy (above ``max``, not a
listed value) makes the device unsuitable, as does a request naming a capacity the device does not publish
under exactly that name (unlike CEL, a request for ``<driver>/memory`` does not find a capacity ``memory``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from gpudra.allocator.pools import CapacitySpec, DeviceEntry


def consumed_amount(requested: Fraction | None, cap: CapacitySpec) -> Fraction:
    if requested is None:
        return cap.default if cap.default is not None else cap.value
    if not cap.has_policy:
        return requested
    if cap.range_min is not None:
        if requested < cap.range_min:
            return cap.range_min
        if cap.range_step is None or cap.range_step <= 0:
            return requested
        steps = math.ceil((requested - cap.range_min) / cap.range_step)
        return cap.range_min + cap.range_step * steps
    if cap.valid_values:
        for v in cap.valid_values:
            if requested <= v:
                return v
    return requested


def violates_policy(amount: Fraction, cap: CapacitySpec) -> bool:
    if not cap.has_policy:
        return False
    if cap.default is not None and amount == cap.default:
        return False
    if cap.range_min is not None:
        if cap.range_max is not None and amount > cap.range_max:
            return True
        if cap.range_step is not None and cap.range_step > 0:
            return (amount - cap.range_min) % cap.range_step != 0
        return False
    if cap.valid_values:
        return amount not in cap.valid_values
    return False


def capacity_demand(requests: Mapping[str, Fraction], entry: DeviceEntry) -> dict[str, Fraction] | None:
    """What one allocation of ``entry`` for a request with these capacity requests consumes, per published
    capacity name; None when the device cannot serve the request whatever else is allocated."""
    if any(name not in entry.capacity for name in requests):
        return None  # names compare exactly: "memory" and "<driver>/memory" are different capacities here
    demand: dict[str, Fraction] = {}
    for name, cap in entry.capacity.items():
        amount = consumed_amount(requests.get(name), cap)
        if amount < 0 or violates_policy(amount, cap):
            return None
        demand[name] = amount
    return demand


def fits_capacity(
    entry: DeviceEntry,
    demand: Mapping[str, Fraction],
    committed: Mapping[str, Fraction],
    attempt: Mapping[str, Fraction] | None,
) -> bool:
    for name, amount in demand.items():
        used = committed.get(name, Fraction(0)) + (attempt.get(name, Fraction(0)) if attempt else Fraction(0))
        if used + amount > entry.capacity[name].value:
            return False
    return True


def fits_counters(
    entry: DeviceEntry,
    available: Mapping[tuple[str, str], Fraction],
    attempt: Mapping[tuple[str, str, str, str], Fraction] | None,
) -> bool:
    """Whether the device's counter consumption fits what is left of its pool's counter sets."""
    for set_name, counter, value in entry.consumes:
        left = available.get((set_name, counter), Fraction(0))
        if attempt:
            left -= attempt.get((entry.id.driver, entry.id.pool, set_name, counter), Fraction(0))
        if value > left:
            return False
    return True
